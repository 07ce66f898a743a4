"""NeMo Gym 0.7's `compute_aggregate_metrics`: one environment server's rollouts -> `AggregateMetrics` (pure).

What a resources server answers on `/aggregate_metrics` (gym_compose.server.aggregation), and
what the collector computes itself for a server that has no such route. Masked samples
(`mask_sample: true`) are left out of the statistics and reported as `coverage/` counts;
`compute_metrics(tasks)` is merged into `agent_metrics` (its `per_task_metrics` into the matching
`group_level_metrics`); `get_key_metrics(agent_metrics)` picks the headline `key_metrics`.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from gym_compose.metrics.agent_metrics import describe, group_metrics, numeric_fields
from gym_compose.metrics.row_keys import ROLLOUT_INDEX, TASK_INDEX

MASK_SAMPLE = "mask_sample"
PER_TASK_METRICS = "per_task_metrics"
AGGREGATE_AGENT = "agent"  # NeMo Gym profiles one server's rollouts under this placeholder agent name

Tasks = list[list[dict[str, Any]]]


def default_key_metrics(agent_metrics: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in agent_metrics.items() if key.startswith("mean/")}


def compute_aggregate_metrics(
    verify_responses: list[dict[str, Any]],
    compute_metrics: Callable[[Tasks], dict[str, Any]] | None = None,
    get_key_metrics: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    compute_repeat_metrics: Callable[[Tasks], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """NeMo Gym's `AggregateMetrics` for one server's rollouts, as a plain dict."""
    if not verify_responses:
        return empty_aggregate_metrics()
    scored = [r for r in verify_responses if not r.get(MASK_SAMPLE)]
    coverage = _coverage(verify_responses, scored) if len(scored) < len(verify_responses) else {}
    if not scored:
        return {**empty_aggregate_metrics(), "agent_metrics": dict(coverage), "key_metrics": dict(coverage)}

    measured = [{TASK_INDEX: r.get(TASK_INDEX, 0), ROLLOUT_INDEX: r.get(ROLLOUT_INDEX, 0),
                 **{k: v for k, v in r.items() if k != MASK_SAMPLE}} for r in scored]
    tasks = _by_task(measured)
    agent_metrics: dict[str, Any] = describe([numeric_fields(r) for r in measured])
    groups = [group_metrics(AGGREGATE_AGENT, task, results, len(results)) for task, results in tasks.items()]
    repeats = repeat_level_metrics(measured)
    agent_metrics.update(across_repeats(repeats))
    agent_metrics.update(coverage)

    custom: dict[str, Any] = {}
    if compute_metrics is not None:
        custom = dict(compute_metrics(_by_task_of_raw(scored)) or {})
        per_task = custom.pop(PER_TASK_METRICS, None)
        if isinstance(per_task, list):
            by_index = {m.get(TASK_INDEX): m for m in per_task if isinstance(m, dict)}
            for group in groups:
                extra = by_index.get(group[TASK_INDEX])
                if extra:
                    group.update({k: v for k, v in extra.items() if k != TASK_INDEX})
        agent_metrics.update(custom)
    agent_metrics["num_repeats"] = len({r.get(ROLLOUT_INDEX, 0) for r in verify_responses})

    key_metrics = dict((get_key_metrics or default_key_metrics)(agent_metrics) or {})
    key_metrics.update(coverage)
    if compute_repeat_metrics is not None and repeats:
        _add_custom_repeat_metrics(scored, repeats, agent_metrics, custom, compute_repeat_metrics)
    return {"group_level_metrics": groups, "agent_metrics": agent_metrics, "key_metrics": key_metrics,
            "repeat_level_metrics": repeats}


def empty_aggregate_metrics() -> dict[str, Any]:
    return {"group_level_metrics": [], "agent_metrics": {}, "key_metrics": {}, "repeat_level_metrics": []}


def repeat_level_metrics(rollouts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rollout index, the statistics of each numeric field across tasks; empty unless rows repeat."""
    by_repeat: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for rollout in rollouts:
        by_repeat[rollout[ROLLOUT_INDEX]].append(rollout)
    if len(by_repeat) < 2:
        return []
    total_tasks = len({r[TASK_INDEX] for r in rollouts})
    numbers = [numeric_fields(r) for r in rollouts]
    columns = sorted({key for record in numbers for key in record})
    entries = []
    for repeat in sorted(by_repeat, key=_order):
        records = [numeric_fields(r) for r in by_repeat[repeat]]
        present = len({r[TASK_INDEX] for r in by_repeat[repeat]})
        entry: dict[str, Any] = {ROLLOUT_INDEX: repeat, "sample_count": present, "missing_count": total_tasks - present}
        for column in columns:
            values = [float(record[column]) for record in records if column in record]
            if not values:
                continue
            mean, std = statistics.fmean(values), _std(values)
            sem = std / math.sqrt(len(values))
            entry.update({f"mean/{column}": mean, f"median/{column}": float(statistics.median(values)),
                          f"std/{column}": std, f"sem/{column}": sem, f"min/{column}": min(values),
                          f"max/{column}": max(values), f"p25/{column}": _quantile(values, 0.25),
                          f"p75/{column}": _quantile(values, 0.75)})
            interval = confidence_interval(mean, sem, len(values))
            if interval is not None:
                entry[f"ci_low_95/{column}"], entry[f"ci_high_95/{column}"] = interval
        entries.append(entry)
    return entries


def across_repeats(repeats: list[dict[str, Any]]) -> dict[str, float]:
    """Each repeat's point estimates (its `mean/` entries and custom metrics) summarised across repeats."""
    if not repeats:
        return {}
    names = [name for name in dict.fromkeys(k for entry in repeats for k in entry) if _is_primary_metric(name)
             and any(_is_finite(entry.get(name)) for entry in repeats)]
    summary: dict[str, float] = {}
    for name in names:
        values = [float(entry[name]) for entry in repeats if _is_finite(entry.get(name))]
        mean, std = statistics.fmean(values), _std(values)
        se = std / math.sqrt(len(values))
        summary.update({f"mean_across_repeats/{name}": mean,
                        f"median_across_repeats/{name}": float(statistics.median(values)),
                        f"std_across_repeats/{name}": std, f"min_across_repeats/{name}": min(values),
                        f"max_across_repeats/{name}": max(values), f"se_across_repeats/{name}": se})
        interval = confidence_interval(mean, se, len(values))
        if interval is not None:
            summary[f"ci_low_95_across_repeats/{name}"], summary[f"ci_high_95_across_repeats/{name}"] = interval
    return summary


def _add_custom_repeat_metrics(scored: list[dict[str, Any]], repeats: list[dict[str, Any]],
                               agent_metrics: dict[str, Any], custom: dict[str, Any],
                               compute_repeat_metrics: Callable[[Tasks], dict[str, Any]]) -> None:
    """A server's per-repeat metrics replace the generic ones of the same name, and are summarised across repeats."""
    by_repeat: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for response in scored:
        by_repeat[response.get(ROLLOUT_INDEX, 0)].append(response)
    per_repeat = [dict(compute_repeat_metrics(_by_task_of_raw(by_repeat[entry[ROLLOUT_INDEX]])) or {})
                  for entry in repeats]
    names = {name for metrics in per_repeat for name in metrics}
    if not names:
        return
    for name in names:
        values = [metrics.get(name) for metrics in per_repeat]
        for entry in repeats:
            entry.pop(name, None)
        if (name not in custom or _is_finite(custom[name])) and all(_is_finite(v) for v in values):
            for entry, value in zip(repeats, values, strict=True):
                entry[name] = float(value)  # type: ignore[arg-type]
    for key in list(agent_metrics):
        if ACROSS_REPEATS in key and key.split(ACROSS_REPEATS, 1)[1] in names:
            agent_metrics.pop(key)
    agent_metrics.update(across_repeats(repeats))


ACROSS_REPEATS = "_across_repeats/"
_NOT_PRIMARY_PREFIXES = tuple(f"{stat}/" for stat in ("max", "min", "median", "std", "sem", "se", "p25", "p75",
                                                     "ci_low_95", "ci_high_95", "histogram"))
_NOT_PRIMARY_SUFFIXES = ("/max", "/min", "/median", "/p5", "/p25", "/p75", "/p95", "/ci_low_95", "/ci_high_95",
                         "/ci_lower", "/ci_upper", "_ci_lower", "_ci_upper", "_ci95_lower", "_ci95_upper",
                         "/_ng_attempt_index", "/std_dev_across_runs", "/std_err_across_runs",
                         "/avg_sample_std_dev")
_NOT_PRIMARY_NAMES = (TASK_INDEX, ROLLOUT_INDEX, "_ng_attempt_index", "sample_count", "missing_count",
                      "num_repeats", "token_usage_version")


def _is_primary_metric(name: str) -> bool:
    """NeMo Gym's `metrics_config.is_primary_metric`: a point estimate, not a statistic of one."""
    return (name not in _NOT_PRIMARY_NAMES and not name.startswith(_NOT_PRIMARY_PREFIXES)
            and not name.endswith(_NOT_PRIMARY_SUFFIXES) and ACROSS_REPEATS not in name)


def _is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _std(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _quantile(values: list[float], q: float) -> float:
    """pandas' default quantile (linear interpolation between closest ranks)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def confidence_interval(mean: float, sem: float, n: int) -> tuple[float, float] | None:
    """The 95% Student-t interval around `mean` (None for one value; a point when sem is 0)."""
    if n <= 1:
        return None
    if sem == 0:
        return mean, mean
    half = student_t_quantile(0.975, n - 1) * sem
    return mean - half, mean + half


def student_t_quantile(p: float, dof: int) -> float:
    """The p-quantile (p > 0.5) of Student's t with `dof` degrees of freedom, by bisection on its CDF."""
    low, high = 0.0, 1.0
    while _student_t_cdf(high, dof) < p:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if _student_t_cdf(middle, dof) < p:
            low = middle
        else:
            high = middle
        if high - low <= 1e-15 * high:
            break
    return (low + high) / 2


def _student_t_cdf(t: float, dof: int) -> float:
    x = dof / (dof + t * t)
    tail = 0.5 * _regularized_incomplete_beta(dof / 2, 0.5, x)
    return 1 - tail if t >= 0 else tail


def _regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1 - math.exp(log_front) * _beta_continued_fraction(b, a, 1 - x) / b


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function, by the modified Lentz method."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1) < 1e-16:
            break
    return result


def _by_task(rollouts: list[dict[str, Any]]) -> dict[Any, list[dict[str, Any]]]:
    tasks: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for rollout in sorted(rollouts, key=lambda r: (_order(r[TASK_INDEX]), _order(r[ROLLOUT_INDEX]))):
        tasks[rollout[TASK_INDEX]].append(rollout)
    return dict(tasks)


def _by_task_of_raw(responses: list[dict[str, Any]]) -> Tasks:
    """What NeMo Gym hands `compute_metrics`: the responses as posted, grouped by task index, in arrival order."""
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for response in responses:
        groups[response.get(TASK_INDEX, 0)].append(response)
    return [groups[key] for key in sorted(groups, key=_order)]


def _order(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, (int, float)) else (1, str(value))


def _coverage(every: list[dict[str, Any]], scored: list[dict[str, Any]]) -> dict[str, int]:
    all_tasks = {r.get(TASK_INDEX, 0) for r in every}
    measured = {r.get(TASK_INDEX, 0) for r in scored}
    return {"coverage/measured_rollouts": len(scored), "coverage/masked_rollouts": len(every) - len(scored),
            "coverage/measured_tasks": len(measured), "coverage/fully_masked_tasks": len(all_tasks - measured)}


