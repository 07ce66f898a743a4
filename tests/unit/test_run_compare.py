"""`eval compare`: key metrics side by side with deltas, tasks matched by their rows (not by
finishing order) and the flipped ones listed."""

import json
from pathlib import Path

import pytest

from gym_compose.errors import UserError
from gym_compose.metrics.agent_metrics import aggregate_metrics
from gym_compose.runs.compare import as_json, compare, load_run, report


def row(question: str, task: int, rollout: int = 0) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": question}]}, "question": question,
            "agent_ref": {"name": "math_agent"}, "_ng_task_index": task, "_ng_rollout_index": rollout}


def write_run(folder: Path, rewards: dict[str, list[float]], order=None) -> Path:
    """A run folder: one task per question, one rollout per reward, tasks numbered in `order`."""
    folder.mkdir()
    inputs, rollouts = [], []
    for task, question in enumerate(order or list(rewards)):
        for rollout, reward in enumerate(rewards[question]):
            inputs.append(row(question, task, rollout))
            rollouts.append({**row(question, task, rollout), "reward": reward})
    (folder / "rollouts_materialized_inputs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in inputs))
    (folder / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reversed(rollouts)))
    metrics = aggregate_metrics(rollouts, inputs, repeated=True)
    (folder / "rollouts_aggregate_metrics.json").write_text(json.dumps(metrics))
    return folder


def test_a_run_against_itself_has_no_delta_and_no_flip(tmp_path):
    run = write_run(tmp_path / "a", {"1+1": [1.0, 1.0], "2+2": [0.0, 1.0], "3+3": [0.0, 0.0]})
    comparison = compare(load_run(run), load_run(run))
    assert comparison.flipped == [] and comparison.common == 3
    assert all(a == b for _, _, a, b in comparison.rows)
    names = {name for _, name, _, _ in comparison.rows}
    assert names >= {"mean/reward", "pass@2/accuracy", "pass@1[avg-of-2]/accuracy"}
    assert "0 flipped" in report(comparison)


def test_flips_are_found_by_row_whatever_the_task_numbering(tmp_path):
    a = write_run(tmp_path / "a", {"1+1": [1.0, 1.0], "2+2": [0.0, 1.0], "3+3": [0.0, 0.0]})
    b = write_run(tmp_path / "b", {"1+1": [0.0, 0.0], "2+2": [1.0, 0.0], "3+3": [1.0, 1.0], "4+4": [1.0, 1.0]},
                  order=["3+3", "4+4", "2+2", "1+1"])
    comparison = compare(load_run(a), load_run(b))
    flipped = {old.prompt: (old.mean, new.mean) for old, new in comparison.flipped}
    assert flipped == {"question=1+1": (1.0, 0.0), "question=3+3": (0.0, 1.0)}  # 2+2 passes in both (mean 0.5)
    assert (comparison.common, comparison.only_a, comparison.only_b) == (3, 0, 1)
    mean = next(r for r in comparison.rows if r[1] == "mean/reward")
    assert mean[2] == pytest.approx(0.5) and mean[3] == pytest.approx(5 / 8)
    text = report(comparison)
    assert "2 flipped (1 pass -> fail, 1 fail -> pass); 0 only in A, 1 only in B" in text
    assert "+0.125" in text
    assert as_json(comparison)["tasks"] == {"common": 3, "only_a": 0, "only_b": 1}


def test_a_folder_without_rollouts_is_refused_with_the_reason(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="holds no rollouts"):
        load_run(tmp_path / "empty")
    with pytest.raises(UserError, match="is not a run folder"):
        load_run(tmp_path / "missing")
