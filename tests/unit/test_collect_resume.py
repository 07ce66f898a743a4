"""Resume bookkeeping: torn last lines, finished and failed rollouts, progress.json, knob precedence."""

from __future__ import annotations

import json

import pytest

from gym_compose.collect.artifacts import ArtifactPaths
from gym_compose.collect.cli import load_config_from_env, options_from, parse_args
from gym_compose.collect.collector import collect
from gym_compose.collect.jsonl import repair_torn_tail
from gym_compose.collect.options import CollectOptions
from gym_compose.collect.progress import ProgressTracker, read_progress
from gym_compose.collect.resume import load_prior_runs
from gym_compose.errors import UserError


def line(task: int, rollout: int = 0, **extra) -> bytes:
    return json.dumps({"_ng_task_index": task, "_ng_rollout_index": rollout, **extra}).encode() + b"\n"


def test_torn_last_line_is_cut_and_other_rows_kept(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(line(0, reward=1.0) + line(1, reward=0.0) + b'{"_ng_task_index": 2, "_ng_rol')
    assert repair_torn_tail(path) == len(b'{"_ng_task_index": 2, "_ng_rol')
    assert path.read_bytes() == line(0, reward=1.0) + line(1, reward=0.0)
    assert repair_torn_tail(path) == 0


def test_complete_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(line(0) + line(1).rstrip(b"\n"))
    assert repair_torn_tail(path) == 0
    assert path.read_bytes() == line(0) + line(1)


def test_prior_runs_count_successes_once_and_failed_attempts(tmp_path):
    paths = ArtifactPaths(tmp_path)
    paths.rollouts.write_bytes(line(0, reward=1.0) + line(1, reward=0.0) + line(1, reward=0.0) + b'{"_ng_ta')
    paths.failures.write_bytes(line(2) + line(2) + line(3) + line(2) + line(4))
    prior = load_prior_runs(paths)
    assert prior.done == {(0, 0), (1, 0)}
    assert (prior.reward_sum, prior.rewarded) == (1.0, 2)
    assert prior.failed_attempts[(2, 0)] == 3 and prior.failed_attempts[(3, 0)] == 1
    assert not prior.attempts_left((0, 0), 3)  # finished
    assert not prior.attempts_left((2, 0), 3)  # three attempts spent
    assert prior.attempts_left((3, 0), 3) and prior.attempts_left((9, 0), 3)
    assert paths.rollouts.read_bytes().endswith(b"\n")


def test_a_fresh_run_refuses_a_folder_with_rollouts(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"responses_create_params": {"input": "hi"}}\n')
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "rollouts.jsonl").write_bytes(line(0))
    config = {"env": {"environment_servers": {"x": {"host": "127.0.0.1", "port": 9, "agent_server": {"name": "a"}}}}}
    with pytest.raises(UserError, match="already holds rollouts"):
        collect(config, CollectOptions(input_path=rows, output_dir=tmp_path / "out"))
    assert (tmp_path / "out" / "rollouts.jsonl").read_bytes() == line(0)


def test_progress_is_written_and_read_back(tmp_path):
    assert read_progress(tmp_path) is None
    tracker = ProgressTracker(tmp_path, total=4, done_before=1, reward_sum_before=1.0, rewarded_before=1)
    tracker.record_success({"reward": 0.0})
    tracker.record_failure()
    tracker.write(finished=True)
    progress = read_progress(tmp_path)
    assert {k: progress[k] for k in ("total", "done", "failed", "mean_reward", "finished")} == {
        "total": 4, "done": 2, "failed": 1, "mean_reward": 0.5, "finished": True}
    assert progress["rollouts_per_second"] > 0 and progress["started_at"]
    (tmp_path / "progress.json").write_text("{not json")
    assert read_progress(tmp_path) is None


def test_cli_flags_override_config_knobs():
    config = {"num_samples_in_parallel": 4, "max_resident_rollout_tasks": 2, "retain_results_in_memory": False,
              "disable_aggregation": True}
    from_config = options_from(parse_args(["--input", "i", "--output-dir", "o"]), config)
    assert (from_config.num_samples_in_parallel, from_config.max_resident_rollout_tasks) == (4, 2)
    assert not from_config.retain_results_in_memory and from_config.disable_aggregation
    assert from_config.concurrency(pending=100) == 2
    overridden = options_from(parse_args(["--input", "i", "--output-dir", "o", "--num-samples-in-parallel", "16",
                                          "--max-resident-rollout-tasks", "32"]), config)
    assert overridden.concurrency(pending=100) == 16
    with pytest.raises(UserError, match="num_samples_in_parallel must be a positive integer"):
        options_from(parse_args(["--input", "i", "--output-dir", "o"]), {"num_samples_in_parallel": 0})


def test_config_env_errors_are_clear():
    with pytest.raises(UserError, match="NEMO_GYM_CONFIG_DICT is not set"):
        load_config_from_env({})
    with pytest.raises(UserError, match="must be a YAML mapping"):
        load_config_from_env({"NEMO_GYM_CONFIG_DICT": "- a\n- b\n"})


def test_the_collector_imports_only_what_the_slim_image_ships():
    import subprocess
    import sys

    # rich is left out: httpx imports it for its own CLI when present and does without it otherwise
    code = ("import sys, gym_compose.collect.cli; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'omegaconf', 'hydra', 'typer', 'python_on_whales', 'fastapi'})"
            " + sorted(m for m in sys.modules if m.startswith(('gym_compose.config', 'gym_compose.engine'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert loaded.strip() == "[]"
