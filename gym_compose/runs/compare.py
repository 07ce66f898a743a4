"""`gym-compose eval compare RUN_A RUN_B`: two run folders side by side: each agent's key metrics
with their deltas, and the tasks that flipped between passing and failing.

A task is one distinct row as sent (the row of `rollouts_materialized_inputs.jsonl` without the
collector's `_ng_` fields), so two runs of the same rows match whatever order they finished in,
and a rerun's tasks meet the original's. A task *passes* when the mean reward of its rollouts is
at least 0.5 (for 0/1 rewards: at least half its rollouts succeeded). A rollout counts once, by
its final outcome: a success row, else a failed rollout (reward 0, however many attempts failed).
Lines that cannot be read are skipped and said (file, how many, which). Host side; reads files only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gym_compose.console import say
from gym_compose.errors import UserError
from gym_compose.metrics.agent_metrics import agent_of, aggregate_metrics
from gym_compose.metrics.row_keys import ROLLOUT_INDEX, TASK_INDEX, first_of_each_rollout, sortable
from gym_compose.view.run_model import prompt_of

PASS_THRESHOLD = 0.5
LABEL_KEYS = ("id", "task_id", "instance_id", "question", "seed")  # what a person knows a task by, in order
KEY_PREFIXES = ("mean/reward", "pass@", "majority@", "mean/cost.")  # mean/cost.: per rollout (docs/sandboxes.md)


@dataclass
class TaskResult:
    agent: str
    index: Any
    prompt: str | None
    rewards: list[float] = field(default_factory=list)

    @property
    def mean(self) -> float | None:
        return sum(self.rewards) / len(self.rewards) if self.rewards else None

    @property
    def passed(self) -> bool:
        return self.mean is not None and self.mean >= PASS_THRESHOLD


@dataclass
class RunResults:
    path: Path
    metrics: dict[str, dict[str, float]]  # agent -> key metric -> value
    tasks: dict[str, TaskResult]  # task key -> result
    failures: int  # rollouts whose final outcome is a failure
    benchmark: str | None = None  # what the run measured, from its manifest (None: no manifest)
    notes: list[str] = field(default_factory=list)  # lines skipped, said to the user


def _read_jsonl(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    """The file's JSON-object lines (bytes parsed as they are: a torn UTF-8 sequence is a bad
    line, not a crash); what was skipped goes to `notes`."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    rows, bad = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            row = None
        if isinstance(row, dict):
            rows.append(row)
        elif number == len(lines):  # no newline after it: the line a crash left torn
            notes.append(f"{path}: skipped its torn last line {number} (a crash cut it short; "
                         "`--resume` cuts it too)")
        else:
            bad.append(number)
    if bad:
        shown = ", ".join(str(number) for number in bad[:10]) + (", ..." if len(bad) > 10 else "")
        notes.append(f"{path}: skipped {len(bad)} line(s) that are not JSON objects: line {shown}")
    return rows


def task_label(row: dict[str, Any]) -> str | None:
    """The row's own id (`id`, `task_id`, ...) or question, else its last user message."""
    for key in LABEL_KEYS:
        if row.get(key) not in (None, ""):
            return f"{key}={row[key]}"
    return prompt_of(row)


def task_key(row: dict[str, Any]) -> str:
    """A row as sent, without the collector's bookkeeping: the same task in any run of the same rows."""
    kept = {key: value for key, value in row.items() if not key.startswith("_ng_")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def key_metrics(agent_metrics: dict[str, Any]) -> dict[str, float]:
    return {name: value for name, value in agent_metrics.items()
            if name.startswith(KEY_PREFIXES) and isinstance(value, (int, float))}


def load_run(path: Path) -> RunResults:
    if not path.is_dir():
        raise UserError(f"{path} is not a run folder")
    notes: list[str] = []
    rollouts = first_of_each_rollout(_read_jsonl(path / "rollouts.jsonl", notes))
    inputs = _read_jsonl(path / "rollouts_materialized_inputs.jsonl", notes)
    succeeded = {(row.get(TASK_INDEX), row.get(ROLLOUT_INDEX)) for row in rollouts}
    # every attempt that failed has a row; a rollout counts once, and not at all when it succeeded later
    failed = [row for row in first_of_each_rollout(_read_jsonl(path / "rollouts_failures.jsonl", notes))
              if (row.get(TASK_INDEX), row.get(ROLLOUT_INDEX)) not in succeeded]
    if not rollouts and not inputs and not failed:
        raise UserError(f"{path} holds no rollouts (rollouts.jsonl) and no inputs",
                        hint="pass run folders that `gym-compose eval run` or `up --benchmark` wrote")
    keys: dict[tuple[str, Any], str] = {}
    tasks: dict[str, TaskResult] = {}
    for row in inputs:
        agent = agent_of(row)
        key = keys.setdefault((agent, row.get(TASK_INDEX)), task_key(row))
        tasks.setdefault(key, TaskResult(agent, row.get(TASK_INDEX), task_label(row)))
    for row, reward in [*((row, row.get("reward")) for row in rollouts), *((row, 0.0) for row in failed)]:
        agent = agent_of(row)
        key = keys.get((agent, row.get(TASK_INDEX))) or f"{agent}#{row.get(TASK_INDEX)}"
        task = tasks.setdefault(key, TaskResult(agent, row.get(TASK_INDEX), task_label(row)))
        if isinstance(reward, (int, float)) and not isinstance(reward, bool):
            task.rewards.append(float(reward))
    metrics_file = path / "rollouts_aggregate_metrics.json"
    try:
        entries = json.loads(metrics_file.read_text(encoding="utf-8")) if metrics_file.is_file() else None
    except json.JSONDecodeError:
        entries = None
    if not isinstance(entries, list):
        entries = aggregate_metrics(rollouts)
    metrics = {str((entry.get("agent_ref") or {}).get("name")): key_metrics(entry.get("agent_metrics") or {})
               for entry in entries if isinstance(entry, dict)}
    return RunResults(path, metrics, tasks, len(failed), run_benchmark(path), notes)


def run_benchmark(path: Path) -> str | None:
    """What the run measured, as its manifest's config says: its benchmark datasets' names, else
    (rows given with --input) the resources servers that scored them; None without a manifest."""
    from gym_compose.config.instances import instances

    try:
        config = json.loads((path / "manifest.json").read_text(encoding="utf-8")).get("resolved_config")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(config, dict):
        return None
    servers = instances(config)
    datasets = sorted({str(entry.get("name")) for server in servers for entry in server.spec.get("datasets") or []
                       if isinstance(entry, dict) and entry.get("type") == "benchmark"})
    if datasets:
        return "benchmark " + ", ".join(datasets)
    scorers = sorted({server.implementation for server in servers if server.server_type == "resources_servers"})
    return "resources servers " + ", ".join(scorers) if scorers else None


@dataclass
class Comparison:
    a: RunResults
    b: RunResults
    rows: list[tuple[str, str, float | None, float | None]]  # agent, metric, A, B
    flipped: list[tuple[TaskResult, TaskResult]]  # (in A, in B)
    common: int
    only_a: int
    only_b: int
    warnings: list[str] = field(default_factory=list)  # why the runs may not be comparable


def compare(a: RunResults, b: RunResults) -> Comparison:
    rows = []
    for agent in sorted(set(a.metrics) | set(b.metrics)):
        names = sorted(set(a.metrics.get(agent, {})) | set(b.metrics.get(agent, {})),
                       key=lambda name: (not name.startswith("mean/"), name))
        for name in names:
            rows.append((agent, name, a.metrics.get(agent, {}).get(name), b.metrics.get(agent, {}).get(name)))
    common = set(a.tasks) & set(b.tasks)
    flipped = [(a.tasks[key], b.tasks[key]) for key in common
               if a.tasks[key].rewards and b.tasks[key].rewards and a.tasks[key].passed != b.tasks[key].passed]
    flipped.sort(key=lambda pair: (pair[0].agent, sortable(pair[0].index)))
    return Comparison(a, b, rows, flipped, len(common), len(set(a.tasks) - common), len(set(b.tasks) - common),
                      comparability(a, b, len(common)))


def comparability(a: RunResults, b: RunResults, common: int) -> list[str]:
    """Why the two runs may not measure the same thing: their benchmarks differ, no agent or no
    task is in both."""
    warnings = []
    if a.benchmark and b.benchmark and a.benchmark != b.benchmark:
        warnings.append(f"the runs are of different benchmarks: A {a.benchmark}, B {b.benchmark}; "
                        "their metrics and tasks are not comparable")
    agents_a, agents_b = {t.agent for t in a.tasks.values()}, {t.agent for t in b.tasks.values()}
    if agents_a and agents_b and not agents_a & agents_b:
        warnings.append(f"no agent is in both runs (A: {', '.join(sorted(agents_a))}; "
                        f"B: {', '.join(sorted(agents_b))})")
    if common == 0 and a.tasks and b.tasks:
        warnings.append("no task is in both runs: nothing can flip (tasks are matched by their rows)")
    return warnings


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _delta(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "-"
    delta = b - a
    return "0" if delta == 0 else f"{delta:+.4g}"


def report(comparison: Comparison, max_tasks: int = 50) -> str:
    a, b = comparison.a, comparison.b
    lines = [f"A: {a.path}", f"B: {b.path}", ""]
    table = [("AGENT", "METRIC", "A", "B", "DELTA")]
    table += [(agent, name, _number(va), _number(vb), _delta(va, vb)) for agent, name, va, vb in comparison.rows]
    table.append(("(all)", "failed rollouts", str(a.failures), str(b.failures), _delta(a.failures, b.failures)))
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    for row in table:
        lines.append("  ".join(cell.ljust(width) if i < 2 else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(row, widths, strict=True))).rstrip())
    to_fail = sum(1 for old, _ in comparison.flipped if old.passed)
    lines += ["", f"tasks: {comparison.common} in both, {len(comparison.flipped)} flipped "
                  f"({to_fail} pass -> fail, {len(comparison.flipped) - to_fail} fail -> pass); "
                  f"{comparison.only_a} only in A, {comparison.only_b} only in B"]
    for old, new in comparison.flipped[:max_tasks]:
        direction = "pass -> fail" if old.passed else "fail -> pass"
        lines.append(f"  {direction}  {old.agent} task {old.index}: mean reward {_number(old.mean)} -> "
                     f"{_number(new.mean)}  {(old.prompt or '')[:70]}")
    if len(comparison.flipped) > max_tasks:
        lines.append(f"  ... and {len(comparison.flipped) - max_tasks} more (--max-tasks)")
    return "\n".join(lines)


def as_json(comparison: Comparison) -> dict[str, Any]:
    return {
        "a": str(comparison.a.path), "b": str(comparison.b.path),
        "metrics": [{"agent": agent, "metric": name, "a": va, "b": vb,
                     "delta": None if va is None or vb is None else vb - va}
                    for agent, name, va, vb in comparison.rows],
        "failed_rollouts": {"a": comparison.a.failures, "b": comparison.b.failures},
        "benchmarks": {"a": comparison.a.benchmark, "b": comparison.b.benchmark},
        "warnings": comparison.warnings + comparison.a.notes + comparison.b.notes,
        "tasks": {"common": comparison.common, "only_a": comparison.only_a, "only_b": comparison.only_b},
        "flipped": [{"agent": old.agent, "task_index_a": old.index, "task_index_b": new.index,
                     "mean_reward_a": old.mean, "mean_reward_b": new.mean, "passed_a": old.passed,
                     "prompt": old.prompt} for old, new in comparison.flipped],
    }


def compare_command(run_a: Path, run_b: Path, json_output: bool = False, max_tasks: int = 50,
                    fail_below: list[str] | None = None) -> None:
    """Print the comparison; with `fail_below` thresholds (runs/thresholds.py), raise a UserError
    (exit 1) after it when run B fell below run A in one of them."""
    from gym_compose.runs.thresholds import BREACH_EXIT_CODE, breaches, parse_threshold

    thresholds = [parse_threshold(text) for text in fail_below or []]  # bad ones refused before any reading
    comparison = compare(load_run(run_a), load_run(run_b))
    for note in comparison.a.notes + comparison.b.notes:
        say(f"note: {note}")
    for warning in comparison.warnings:
        say(f"warning: {warning}")
    print(json.dumps(as_json(comparison), indent=2) if json_output else report(comparison, max_tasks))
    found = breaches(comparison.rows, thresholds)
    if found:
        raise UserError("run B fell below run A: " + "; ".join(found), exit_code=BREACH_EXIT_CODE,
                        hint="A is the baseline; the tolerance is the part after = in --fail-below METRIC=TOLERANCE")
    if thresholds:
        say("thresholds held: " + ", ".join(str(t) for t in thresholds))
