"""Aggregate metrics in NeMo Gym's shape, computed from the rollouts file (pure Python, no pandas).

Per agent: `agent_metrics` (mean/ max/ min/ median/ std/ of every numeric top-level field and of
`response.usage`, booleans as 0/1, keys starting with `_` left out; std is the sample std),
`key_metrics` (the mean/ entries), `group_level_metrics` (the same per task, with rollout infos),
and, when rows were repeated, pass@k/, pass@1[avg-of-k]/ and (rows with `extracted_answer`)
majority@k/ of the reward, named `accuracy` as NeMo Gym's default score function does.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from typing import Any

from gym_compose.metrics.row_keys import ROLLOUT_INDEX, TASK_INDEX, rollout_key, sortable, sortable_rollout_key

STATS = ("mean", "max", "min", "median", "std")
ANSWER_KEY = "extracted_answer"
UNNAMED_AGENT = "unnamed_agent"


def agent_of(row: dict[str, Any]) -> str:
    agent_ref = row.get("agent_ref")
    if isinstance(agent_ref, dict) and agent_ref.get("name") is not None:
        return str(agent_ref["name"])
    return str(row.get("_ng_environment_server") or UNNAMED_AGENT)


COST_KEY = "cost"  # a rollout's cost block (docs/sandboxes.md#what-a-rollout-cost): cost.KEY columns


def numeric_fields(result: dict[str, Any]) -> dict[str, float | int]:
    """The numbers NeMo Gym profiles: top-level fields, then response.usage; bools as ints; then
    gym-compose's `cost` block as `cost.KEY`."""
    usage = (result.get("response") or {}).get("usage") or {}
    cost = result.get(COST_KEY)
    costs = {f"{COST_KEY}.{k}": v for k, v in cost.items()} if isinstance(cost, dict) else {}
    fields: dict[str, float | int] = {}
    for key, value in {**result, **usage, **costs}.items():
        if key.startswith("_"):
            continue
        if isinstance(value, bool):
            fields[key] = int(value)
        elif isinstance(value, (int, float)):
            fields[key] = value
    return fields


def describe(records: list[dict[str, float | int]]) -> dict[str, float]:
    """mean/max/min/median/std of each column, columns in order of first appearance.

    Like pandas: a column's stats skip rows that lack it; std is undefined for one value,
    except that when no column has a defined std, the columns present in every row get 0.
    """
    columns: dict[str, list[float]] = {}
    for record in records:
        for key, value in record.items():
            columns.setdefault(key, []).append(value)
    stds = {key: _sample_std(values) for key, values in columns.items()}
    if all(std is None for std in stds.values()):
        stds = {key: 0.0 if len(values) == len(records) else None for key, values in columns.items()}
    computed: dict[str, dict[str, float | None]] = {
        "mean": {key: sum(values) / len(values) for key, values in columns.items()},
        "max": {key: float(max(values)) for key, values in columns.items()},
        "min": {key: float(min(values)) for key, values in columns.items()},
        "median": {key: float(statistics.median(values)) for key, values in columns.items()},
        "std": stds,
    }
    return {
        f"{stat}/{key}": value
        for stat in STATS
        for key, value in computed[stat].items()
        if value is not None and not math.isnan(value)
    }


def cost_sums(results: list[dict[str, Any]]) -> dict[str, float]:
    """`sum/cost.KEY` over the rollouts that have it: what the agent's rollouts cost in all."""
    sums: dict[str, float] = {}
    for result in results:
        cost = result.get(COST_KEY)
        if not isinstance(cost, dict):
            continue
        for key, value in cost.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                sums[f"sum/{COST_KEY}.{key}"] = sums.get(f"sum/{COST_KEY}.{key}", 0) + value
    return sums


def _sample_std(values: list[float]) -> float | None:
    # numpy's two-pass formula (not statistics.stdev), so the last digits match NeMo Gym's files
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def rollout_info(result: dict[str, Any]) -> dict[str, Any]:
    task_index, rollout_index = rollout_key(result)
    info: dict[str, Any] = {"rollout_id": f"{task_index}:{rollout_index}", TASK_INDEX: task_index,
                            ROLLOUT_INDEX: rollout_index}
    if "reward" in result:
        info["reward"] = result["reward"]
    usage = (result.get("response") or {}).get("usage") or {}
    own_fields = {k: v for k, v in result.items() if not k.startswith("_") and k not in ("reward", "response")}
    for source in (usage, own_fields):
        for key, value in source.items():
            if isinstance(value, bool):
                info[key] = int(value)
            elif isinstance(value, (int, float)):
                info[key] = value
    return info


def pass_at_k_metrics(tasks: list[list[dict[str, Any]]]) -> dict[str, float]:
    """pass@k (combinatorial for 0/1 rewards, max of the first k otherwise), pass@1[avg-of-k], majority@k."""
    # rollouts without a numeric reward are left out; each answer stays paired with its own reward
    scored = [[(r.get(ANSWER_KEY), r["reward"]) for r in rollouts if _is_number(r.get("reward"))] for rollouts in tasks]
    scores = [[reward for _, reward in task] for task in scored]
    answers = [[answer for answer, _ in task] for task in scored]
    with_answers = any(a is not None for task in answers for a in task)
    max_k = max((len(s) for s in scores), default=0)
    metrics: dict[str, float] = {}
    for k in range(1, max_k + 1):
        passes = [_pass_at_k(values, k) for values in scores if len(values) >= k]
        if passes:
            metrics[f"pass@{k}/accuracy"] = 100.0 * statistics.fmean(passes)
        averages = [statistics.fmean(values[:k]) for values in scores if values]
        if averages:
            metrics[f"pass@1[avg-of-{k}]/accuracy"] = 100.0 * statistics.fmean(averages)
        if with_answers:
            votes = [_majority_score(task_answers[:k], values[:k])
                     for task_answers, values in zip(answers, scores, strict=False)]
            metrics[f"majority@{k}/accuracy"] = 100.0 * statistics.fmean(votes)
    return metrics


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float))  # bools too, as 0/1


def _pass_at_k(values: list[float], k: int) -> float:
    if all(v in (0, 1) for v in values):
        incorrect = sum(1 for v in values if not v)
        return 1.0 if incorrect < k else 1.0 - math.comb(incorrect, k) / math.comb(len(values), k)
    return float(max(values[:k]))


def _majority_score(answers: list[Any], values: list[float]) -> float:
    votes = Counter((str(a), v) for a, v in zip(answers, values, strict=False) if a is not None)
    if not votes:
        return 0.0
    top = max(votes.values())
    tied = [v for (_, v), count in votes.items() if count == top]
    return sum(tied) / len(tied)


def aggregate_metrics(
    results: list[dict[str, Any]],
    materialized_rows: list[dict[str, Any]] | None = None,
    repeated: bool = False,
) -> list[dict[str, Any]]:
    """One entry per agent, agents in order of first appearance in `results`."""
    expected: Counter = Counter()
    for row in materialized_rows or results:
        expected[(agent_of(row), row[TASK_INDEX])] += 1
    by_agent: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for result in sorted(results, key=sortable_rollout_key):
        by_agent[agent_of(result)].append(result)
    entries = []
    for agent in sorted(by_agent, key=lambda name: min(sortable_rollout_key(r) for r in by_agent[name])):
        agent_results = by_agent[agent]
        agent_metrics = describe([numeric_fields(r) for r in agent_results])
        agent_metrics.update(cost_sums(agent_results))
        by_task: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        for result in agent_results:
            by_task[result[TASK_INDEX]].append(result)
        if repeated:
            agent_metrics.update(pass_at_k_metrics([by_task[task] for task in sorted(by_task, key=sortable)]))
        entries.append(
            {
                "agent_ref": {"name": agent},
                "agent_metrics": agent_metrics,
                "key_metrics": {k: v for k, v in agent_metrics.items() if k.startswith("mean/")},
                "group_level_metrics": [
                    group_metrics(agent, task, by_task[task], expected[(agent, task)])
                    for task in sorted(by_task, key=sortable)
                ],
            }
        )
    return entries


def group_metrics(agent: str, task: Any, results: list[dict[str, Any]], expected: int) -> dict[str, Any]:
    group: dict[str, Any] = {TASK_INDEX: task}
    group.update(describe([numeric_fields(r) for r in results]))
    expected = max(expected, len(results))
    group["sample"] = {"agent_ref": {"name": agent}}
    group["num_rollouts"] = len(results)
    group["expected_num_rollouts"] = expected
    group["missing_num_rollouts"] = expected - len(results)
    group["reward_profile_completion_pct"] = 100.0 * len(results) / expected
    group["rollout_infos"] = [rollout_info(r) for r in sorted(results, key=lambda r: sortable(r[ROLLOUT_INDEX]))]
    return group
