"""`eval compare --fail-below METRIC[=TOLERANCE]`: a run that fell below its baseline fails the command.

A threshold names a key metric (e.g. `mean/reward`, `pass@4/reward`) and how far run B may fall
below run A (the baseline) in it: 0 unless given. Every agent with the metric in both runs is
checked; a metric neither run has is a usage error naming the metrics there are. A breach is
exit status 1 (the CI job fails), naming each agent, metric and both values.
"""

from __future__ import annotations

from dataclasses import dataclass

from gym_compose.errors import UserError

BREACH_EXIT_CODE = 1


@dataclass(frozen=True)
class Threshold:
    metric: str
    tolerance: float = 0.0

    def __str__(self) -> str:
        return f"{self.metric} (tolerance {self.tolerance:g})"


def parse_threshold(text: str) -> Threshold:
    metric, _, tolerance = text.partition("=")
    metric = metric.strip()
    if not metric:
        raise UserError(f"--fail-below {text!r}: name a metric", hint="e.g. --fail-below mean/reward=0.05")
    if not tolerance:
        return Threshold(metric)
    try:
        value = float(tolerance)
    except ValueError:
        raise UserError(f"--fail-below {text!r}: the tolerance {tolerance!r} is not a number",
                        hint="e.g. --fail-below mean/reward=0.05 (B may be at most 0.05 below A)") from None
    if value < 0 or value != value:
        raise UserError(f"--fail-below {text!r}: the tolerance must be 0 or more")
    return Threshold(metric, value)


def breaches(rows: list[tuple[str, str, float | None, float | None]], thresholds: list[Threshold]) -> list[str]:
    """Each (agent, metric) whose B value is more than the tolerance below A, as a sentence.
    `rows` are the comparison's (agent, metric, A, B)."""
    found = []
    for threshold in thresholds:
        checked = [(agent, a, b) for agent, metric, a, b in rows if metric == threshold.metric]
        if not any(a is not None and b is not None for _, a, b in checked):
            names = sorted({metric for _, metric, a, b in rows if a is not None and b is not None})
            raise UserError(f"--fail-below: no agent has {threshold.metric!r} in both runs",
                            hint=f"metrics in both: {', '.join(names) or 'none'}")
        for agent, a, b in checked:
            if a is not None and b is not None and b < a - threshold.tolerance:
                found.append(f"{agent}: {threshold.metric} fell from {a:.4g} (A) to {b:.4g} (B), "
                             f"more than the tolerance {threshold.tolerance:g}")
    return found
