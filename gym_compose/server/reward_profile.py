"""The metric helpers NeMo Gym's resources servers call from `compute_metrics` (`nemo_gym.reward_profile`).

Same names, arguments and results as NeMo Gym 0.7: `compute_pass_majority_metrics`,
`add_avg_sample_std_dev`, `compute_subset_metrics`, `highest_k_metrics`, and
`compute_aggregate_metrics` (gym_compose.metrics.aggregate). Scores are percentages (0-100).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Any, Optional

from gym_compose.metrics import aggregate
from gym_compose.server.aggregation import AggregateMetrics

STD_DEV_ACROSS_RUNS = "/std_dev_across_runs"
STD_ERR_ACROSS_RUNS = "/std_err_across_runs"
AVG_SAMPLE_STD_DEV = "/avg_sample_std_dev"

Tasks = list[list[dict[str, Any]]]
ScoreFn = Callable[[dict[str, Any]], dict[str, Any]]


def _default_score(rollout: dict[str, Any]) -> dict[str, Any]:
    return {"accuracy": rollout["reward"]}


def compute_pass_majority_metrics(
    tasks: Tasks, score_fn: Optional[ScoreFn] = None, answer_key: Optional[str] = None,
) -> tuple[dict[str, Any], list[list[dict[str, float]]], list[str], int]:
    """pass@k, pass@1[avg-of-k], majority@k (with `answer_key`) per score name; returns (metrics, scores, names, max_k).

    `score_fn(rollout)` names the scores (default `{"accuracy": reward}`); with `answer_key` a
    `no_answer` score (1 when the rollout has no answer) is added. Also `per_sample_aggregate` (the
    pass@1 of each rollout index) and, for k >= 2, the std dev / std err of it across runs.
    """
    if not tasks:
        return {}, [], [], 0
    score = score_fn or _default_score
    max_k = max(len(rollouts) for rollouts in tasks)
    scores: list[list[dict[str, float]]] = []
    answers: list[list[Any]] = []
    for rollouts in tasks:
        task_scores, task_answers = [], []
        for rollout in rollouts:
            named = {k: (int(v) if isinstance(v, bool) else v) for k, v in score(rollout).items()}
            if answer_key is not None:
                answer = rollout.get(answer_key)
                task_answers.append(answer)
                named["no_answer"] = 1 if answer is None else 0
            task_scores.append(named)
        scores.append(task_scores)
        answers.append(task_answers)
    names = sorted({name for task in scores for named in task for name in named})

    metrics: dict[str, Any] = {}
    for k in range(1, max_k + 1):
        for name in names:
            passes = [_pass_at_k(values, k) for values in
                      ([s[name] for s in task if name in s] for task in scores) if values and k <= len(values)]
            if passes:
                metrics[f"pass@{k}/{name}"] = 100.0 * sum(passes) / len(passes)
            averages = [sum(values) / len(values) for values in
                        ([s[name] for s in task[:k] if name in s] for task in scores) if values]
            if averages:
                metrics[f"pass@1[avg-of-{k}]/{name}"] = 100.0 * sum(averages) / len(averages)
            if answer_key is not None:
                votes = [_majority(task_answers[:k], task[:k], name)
                         for task, task_answers in zip(scores, answers, strict=False)]
                if votes:
                    metrics[f"majority@{k}/{name}"] = 100.0 * sum(votes) / len(votes)

    per_sample: dict[str, list[float]] = {}
    for run in range(max_k):
        for name in names:
            run_scores = [task[run][name] for task in scores if run < len(task) and name in task[run]]
            if run_scores:
                per_sample.setdefault(name, []).append(100.0 * sum(run_scores) / len(run_scores))
    metrics["per_sample_aggregate"] = {name: per_sample[name] for name in names if name in per_sample}
    for k in range(2, max_k + 1):
        for name in names:
            runs = per_sample.get(name, [])[:k]
            if len(runs) >= 2:
                std = _sample_std(runs)
                metrics[f"pass@1[avg-of-{k}]/{name}{STD_DEV_ACROSS_RUNS}"] = std
                metrics[f"pass@1[avg-of-{k}]/{name}{STD_ERR_ACROSS_RUNS}"] = std / math.sqrt(len(runs))
    return metrics, scores, names, max_k


def _pass_at_k(values: list[float], k: int) -> float:
    if all(v in (0, 1) for v in values):
        incorrect = sum(1 for v in values if not v)
        return 1.0 if incorrect < k else 1.0 - math.comb(incorrect, k) / math.comb(len(values), k)
    return max(values[:k])


def _majority(task_answers: list[Any], task_scores: list[dict[str, float]], name: str) -> float:
    valid = [(answer, named[name]) for answer, named in zip(task_answers, task_scores, strict=False)
             if answer is not None and name in named]
    if not valid:
        return 0
    counts = Counter(valid)
    top = counts.most_common(1)[0][1]
    tied = [value for (_, value), count in counts.items() if count == top]
    return sum(tied) / len(tied)


def _sample_std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def add_avg_sample_std_dev(metrics: dict[str, Any], all_score_dicts: list[list[dict[str, float]]],
                           score_names: list[str], max_k: int) -> None:
    """Adds `pass@1[avg-of-k]/<name>/avg_sample_std_dev`: the mean over tasks of each task's std dev over k rollouts."""
    for k in range(2, max_k + 1):
        for name in score_names:
            stds = [_sample_std(values) for values in
                    ([s[name] for s in task[:k] if name in s] for task in all_score_dicts) if len(values) >= 2]
            if stds:
                metrics[f"pass@1[avg-of-{k}]/{name}{AVG_SAMPLE_STD_DEV}"] = sum(stds) / len(stds)


def compute_subset_metrics(tasks: Tasks, subset_key: str, score_fn: Optional[ScoreFn] = None,
                           answer_key: Optional[str] = None) -> dict[str, Any]:
    """pass@k metrics per value of `subset_key` (taken from a task's first rollout that has it), prefixed `<value>/`."""
    subsets: dict[Any, Tasks] = {}
    for rollouts in tasks:
        value = next((rollout[subset_key] for rollout in rollouts if rollout.get(subset_key)), None)
        if value:
            subsets.setdefault(value, []).append(rollouts)
    metrics: dict[str, Any] = {}
    for subset, subset_tasks in subsets.items():
        subset_metrics, _, _, _ = compute_pass_majority_metrics(subset_tasks, score_fn=score_fn, answer_key=answer_key)
        metrics.update({f"{subset}/{key}": value for key, value in subset_metrics.items()
                        if key != "per_sample_aggregate"})
    return metrics


def highest_k_metrics(agent_metrics: dict[str, Any], pattern: str, score_names: Optional[list[str]] = None,
                      exclude_names: Optional[list[str]] = None) -> dict[str, Any]:
    """The entries matching `pattern` (`{k}` the placeholder, e.g. "pass@{k}") at the highest k present."""
    regex = re.compile("^" + re.escape(pattern).replace(r"\{k\}", r"(\d+)") + "/(.+)$")
    matches = []
    for key in agent_metrics:
        found = regex.match(key)
        if not found:
            continue
        name = found.group(2)
        if name.endswith((STD_DEV_ACROSS_RUNS[1:], STD_ERR_ACROSS_RUNS[1:], AVG_SAMPLE_STD_DEV[1:])):
            continue
        if score_names is not None and name not in score_names:
            continue
        if exclude_names is not None and name in exclude_names:
            continue
        matches.append((int(found.group(1)), key))
    if not matches:
        return {}
    top = max(k for k, _ in matches)
    return {key: agent_metrics[key] for k, key in matches if k == top}


def compute_aggregate_metrics(verify_responses: list[dict[str, Any]], compute_metrics_fn: Any = None,
                              get_key_metrics_fn: Any = None,
                              compute_repeat_metrics_fn: Any = None) -> AggregateMetrics:
    """NeMo Gym's shared `/aggregate_metrics` computation, with its keyword names."""
    return AggregateMetrics.model_validate(aggregate.compute_aggregate_metrics(
        verify_responses, compute_metrics_fn, get_key_metrics_fn, compute_repeat_metrics_fn))


__all__ = ["add_avg_sample_std_dev", "compute_aggregate_metrics", "compute_pass_majority_metrics",
           "compute_subset_metrics", "highest_k_metrics"]
