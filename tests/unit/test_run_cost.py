"""A run's cost: the totals in the manifest and the summary, per rollout in `eval compare`, and in
the viewer's manifest panel (docs/sandboxes.md#what-a-rollout-cost)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from gym_compose.metrics.agent_metrics import aggregate_metrics
from gym_compose.runs.compare import key_metrics
from gym_compose.runs.manifest import write_manifest
from gym_compose.runs.summary import METRICS_FILE, cost_totals, print_summary
from gym_compose.view.service import manifest_view


def rollout(agent: str, task: int, leased_s: float, model_calls: int) -> dict:
    return {"agent_ref": {"name": agent}, "_ng_task_index": task, "_ng_rollout_index": 0, "reward": 1.0,
            "cost": {"sandbox_leased_s": leased_s, "model_calls": model_calls}}


def run_folder(tmp_path):
    rows = [rollout("coder", 0, 2.0, 3), rollout("coder", 1, 4.0, 5), rollout("solver", 0, 1.5, 1)]
    (tmp_path / METRICS_FILE).write_text(json.dumps(aggregate_metrics(rows)))
    return tmp_path


def test_the_runs_totals_add_up_every_agents_sums(tmp_path):
    assert cost_totals(run_folder(tmp_path)) == {"sandbox_leased_s": 7.5, "model_calls": 9}


def test_no_ledger_no_totals(tmp_path):
    (tmp_path / METRICS_FILE).write_text(json.dumps(aggregate_metrics([{"agent_ref": {"name": "a"}, "_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0}])))
    assert cost_totals(tmp_path) == {}
    assert cost_totals(tmp_path / "missing") == {}
    write_manifest(tmp_path, {}, None, {}, datetime.now(timezone.utc), 0)
    assert "cost" not in json.loads((tmp_path / "manifest.json").read_text())


def test_the_manifest_and_the_summary_carry_the_totals(tmp_path, capsys):
    folder = run_folder(tmp_path)
    write_manifest(folder, {}, None, {}, datetime.now(timezone.utc), 0)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["cost"] == {"sandbox_leased_s": 7.5, "model_calls": 9}
    assert manifest_view(manifest)["cost"] == {"sandbox_leased_s": 7.5, "model_calls": 9}
    print_summary(folder)
    printed = capsys.readouterr().out
    assert "cost, all agents:" in printed and "sandbox_leased_s" in printed and "7.5" in printed


def test_compare_shows_the_cost_per_rollout_not_its_spread():
    metrics = aggregate_metrics([rollout("coder", 0, 2.0, 3), rollout("coder", 1, 4.0, 5)])[0]["agent_metrics"]
    shown = key_metrics(metrics)
    assert shown["mean/cost.sandbox_leased_s"] == 3.0 and shown["mean/cost.model_calls"] == 4
    assert not any(name.startswith(("max/cost.", "sum/cost.", "std/cost.")) for name in shown)
