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


# Issue 22: what an adversarial pass found in `eval compare`.

def failure(question: str, task: int, rollout: int = 0, attempt: int = 0) -> dict:
    return {"_ng_task_index": task, "_ng_rollout_index": rollout, "_ng_attempt_index": attempt,
            "agent_ref": {"name": "math_agent"}, "_ng_failure_class": "http_error", "_ng_failure_type": "HTTPError"}


def test_a_torn_utf8_last_line_is_skipped_and_said_not_a_traceback(tmp_path, capsys):
    from gym_compose.runs.compare import compare_command

    a = write_run(tmp_path / "a", {"1+1": [1.0], "2+2": [1.0]})
    with open(a / "rollouts.jsonl", "ab") as out:
        out.write('{"reward": 1.0, "question": "caf\u00e9'.encode()[:-1])  # cut inside the two bytes of é
    compare_command(a, a)
    captured = capsys.readouterr()
    assert "0 flipped" in captured.out and "2 in both" in captured.out
    assert f"{a / 'rollouts.jsonl'}: skipped its torn last line 3" in captured.err


def test_corrupt_middle_lines_are_counted_and_named(tmp_path):
    a = write_run(tmp_path / "a", {"1+1": [1.0], "2+2": [1.0], "3+3": [0.0]})
    lines = (a / "rollouts.jsonl").read_bytes().split(b"\n")
    lines[0], lines[2] = b'{"reward": 1.0, broken', b"\xff\xfe not text"
    (a / "rollouts.jsonl").write_bytes(b"\n".join(lines))
    run = load_run(a)
    assert run.notes == [f"{a / 'rollouts.jsonl'}: skipped 2 line(s) that are not JSON objects: line 1, 3"]
    assert "skipped 2 line(s)" in " ".join(as_json(compare(run, run))["warnings"])


def test_a_run_where_every_rollout_failed_flips_every_task_that_passed(tmp_path):
    a = write_run(tmp_path / "a", {"1+1": [1.0], "2+2": [1.0]})
    b = write_run(tmp_path / "b", {"1+1": [1.0], "2+2": [1.0]})
    (b / "rollouts.jsonl").write_text("")
    failed = [failure("1+1", 0), failure("2+2", 1)]
    (b / "rollouts_failures.jsonl").write_text("".join(json.dumps(row) + "\n" for row in failed))
    comparison = compare(load_run(a), load_run(b))
    assert [(old.passed, new.passed, new.mean) for old, new in comparison.flipped] == [(True, False, 0.0)] * 2
    assert "2 flipped (2 pass -> fail, 0 fail -> pass)" in report(comparison)


def test_retried_attempts_count_a_rollout_once_by_its_final_outcome(tmp_path):
    a = write_run(tmp_path / "a", {"1+1": [1.0, 1.0], "2+2": [1.0]})
    rows = [failure("1+1", 0, rollout=0, attempt=0), failure("1+1", 0, rollout=0, attempt=1),  # then succeeded
            failure("2+2", 1, attempt=0), failure("2+2", 1, attempt=1), failure("2+2", 1, attempt=2)]
    (a / "rollouts.jsonl").write_text("".join(line for line in (a / "rollouts.jsonl").read_text().splitlines(True)
                                              if '"2+2"' not in line))
    (a / "rollouts_failures.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = load_run(a)
    assert run.failures == 1  # 2+2's one rollout, after three attempts; 1+1's recovered
    assert "failed rollouts              1" in report(compare(run, run))


def test_runs_of_different_benchmarks_are_compared_with_a_warning(tmp_path, capsys):
    from gym_compose.runs.compare import compare_command

    def manifest(dataset: str) -> str:
        agent = {"responses_api_agents": {"simple_agent": {"entrypoint": "app.py", "datasets": [
            {"name": dataset, "type": "benchmark", "jsonl_fpath": f"{dataset}.jsonl"}]}}}
        return json.dumps({"resolved_config": {"math_agent": agent}})

    a = write_run(tmp_path / "a", {"1+1": [1.0]})
    b = write_run(tmp_path / "b", {"the capital of France": [1.0]})
    (a / "manifest.json").write_text(manifest("gsm8k"))
    (b / "manifest.json").write_text(manifest("math500"))
    compare_command(a, b)
    err = capsys.readouterr().err
    assert "warning: the runs are of different benchmarks: A benchmark gsm8k, B benchmark math500" in err
    assert "warning: no task is in both runs" in err
    (b / "manifest.json").write_text(manifest("gsm8k"))
    compare_command(a, a)
    assert "warning" not in capsys.readouterr().err


def test_fail_below_fails_a_run_that_fell_past_the_tolerance_and_passes_one_that_held(tmp_path, capsys):
    from gym_compose.runs.compare import compare_command

    baseline = write_run(tmp_path / "base", {"1+1": [1.0, 1.0], "2+2": [1.0, 1.0], "3+3": [0.0, 1.0]})  # 5/6
    held = write_run(tmp_path / "held", {"1+1": [1.0, 1.0], "2+2": [1.0, 0.0], "3+3": [0.0, 1.0]})  # 4/6
    worse = write_run(tmp_path / "worse", {"1+1": [0.0, 0.0], "2+2": [1.0, 0.0], "3+3": [0.0, 0.0]})  # 1/6
    compare_command(baseline, held, fail_below=["mean/reward=0.2"])
    assert "thresholds held: mean/reward (tolerance 0.2)" in capsys.readouterr().err
    with pytest.raises(UserError, match=r"math_agent: mean/reward fell from 0.8333 \(A\) to 0.1667 \(B\)") as caught:
        compare_command(baseline, worse, fail_below=["mean/reward=0.2"])
    assert caught.value.exit_code == 1
    with pytest.raises(UserError, match="fell from 0.8333"):  # no tolerance: any drop fails
        compare_command(baseline, held, fail_below=["mean/reward"])


def test_fail_below_names_what_is_wrong_with_a_threshold(tmp_path):
    from gym_compose.runs.compare import compare_command

    run = write_run(tmp_path / "a", {"1+1": [1.0]})
    with pytest.raises(UserError, match="no agent has 'mean/rewrd' in both runs") as caught:
        compare_command(run, run, fail_below=["mean/rewrd=0.1"])
    assert "mean/reward" in (caught.value.hint or "")
    with pytest.raises(UserError, match="is not a number"):
        compare_command(run, run, fail_below=["mean/reward=lots"])
    with pytest.raises(UserError, match="must be 0 or more"):
        compare_command(run, run, fail_below=["mean/reward=-1"])
