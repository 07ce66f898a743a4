"""Faults on loopback: the host's lease, the run-folder lock, a hung or dead model, error causes.

The collector runs as a subprocess (as in its container); the servers are real processes. A
paused container is a stopped process (SIGSTOP) here: the kernel still accepts its connections.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from gym_compose.collect import CollectOptions, collect
from tests.support import REPO, waiting
from tests.support.collector import collector_cmd, config_yaml, keys, read_jsonl, write_rows
from tests.support.stacks import seed_verify_stack

pytestmark = pytest.mark.protocol
EXAMPLE_ROWS = REPO / "server_images/example_single_tool_call/data/example.jsonl"
WAIT_S = 30


def start_collector(port: int, rows: Path, out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": config_yaml({"agent": port})}
    return subprocess.Popen(collector_cmd(rows, out, *extra), env=env, cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for(predicate, what: str, timeout: float = WAIT_S) -> None:
    waiting.wait_for(predicate, what, timeout, interval=0.05)


def started(out: Path) -> bool:
    return (out / "progress.json").exists()


def requests_seen(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture
def hanging_server(servers, tmp_path, monkeypatch):  # noqa: F811
    """A fake environment server that never answers; `.seen` counts the requests it got."""
    seen = tmp_path / "seen"
    monkeypatch.setenv("FAKE_SERVER_SEEN", str(seen))
    port = servers("ok", delay_s=600)
    monkeypatch.delenv("FAKE_SERVER_SEEN")
    return port, seen


def test_a_stop_line_on_the_lease_fails_the_rollouts_in_flight_with_the_reason(servers, hanging_server, tmp_path):  # noqa: F811
    hanging, seen = hanging_server
    rows = write_rows(tmp_path / "rows.jsonl", 20)
    out = tmp_path / "out"
    collector = start_collector(hanging, rows, out, "--host-lease", "--num-samples-in-parallel", "4")
    wait_for(lambda: requests_seen(seen) == 4, "four rollouts in flight")
    reason = "server policy-model exited (exit code 137, killed (SIGKILL), not out of memory)"
    collector.stdin.write(json.dumps({"stop": reason}) + "\n")
    collector.stdin.flush()
    _, err = collector.communicate(timeout=WAIT_S)
    assert collector.returncode == 1, err
    failures = read_jsonl(out / "rollouts_failures.jsonl")
    assert len(failures) == 4  # the four in flight; the other 16 were never sent
    assert all(f["_ng_failure_class"] == "server_exited" and reason in f["_ng_failure_message"] for f in failures)
    assert "stopped early" in err

    fast = servers("ok")  # the cause fixed: a resume finishes every rollout, each once
    resumed = subprocess.run(collector_cmd(rows, out, "--resume"), cwd=REPO, capture_output=True, text=True,
                             timeout=WAIT_S, env={**os.environ, "NEMO_GYM_CONFIG_DICT": config_yaml({"agent": fast})})
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(keys(read_jsonl(out / "rollouts.jsonl"))) == [(t, 0) for t in range(20)]


def test_the_end_of_the_lease_stops_the_collector_and_records_nothing_for_rollouts_in_flight(hanging_server, tmp_path):
    hanging, _ = hanging_server
    out = tmp_path / "out"
    collector = start_collector(hanging, write_rows(tmp_path / "rows.jsonl", 10), out, "--host-lease")
    wait_for(lambda: started(out), "the collector to start")
    collector.stdin.close()  # what the host's death looks like from inside the container
    assert collector.wait(timeout=WAIT_S) == 130
    assert read_jsonl(out / "rollouts_failures.jsonl") == []
    assert json.loads((out / "progress.json").read_text())["finished"] is True


def test_a_live_writer_is_refused_by_name_and_a_dead_ones_lock_is_taken_over(servers, hanging_server, tmp_path):  # noqa: F811
    hanging, _ = hanging_server
    rows = write_rows(tmp_path / "rows.jsonl", 6)
    out = tmp_path / "out"
    first = start_collector(hanging, rows, out, "--host-lease")
    wait_for(lambda: started(out), "the first collector to start")
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": config_yaml({"agent": hanging})}
    second = subprocess.run(collector_cmd(rows, out, "--resume"), env=env, cwd=REPO, capture_output=True,
                            text=True, timeout=WAIT_S)
    assert second.returncode == 2
    assert "being written by another collector" in second.stderr and f"pid {first.pid}" in second.stderr
    assert read_jsonl(out / "rollouts.jsonl") == []

    first.send_signal(signal.SIGKILL)
    first.wait(timeout=WAIT_S)
    fast = servers("ok")
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": config_yaml({"agent": fast})}
    third = subprocess.run(collector_cmd(rows, out, "--resume"), env=env, cwd=REPO, capture_output=True,
                           text=True, timeout=WAIT_S)
    assert third.returncode == 0, third.stderr
    assert sorted(keys(read_jsonl(out / "rollouts.jsonl"))) == [(t, 0) for t in range(6)]


def test_metrics_count_a_rollout_written_twice_once(servers, tmp_path):  # noqa: F811
    port = servers("ok")
    rows = write_rows(tmp_path / "rows.jsonl", 4)
    out = tmp_path / "out"
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": config_yaml({"agent": port})}
    assert subprocess.run(collector_cmd(rows, out), env=env, cwd=REPO, timeout=WAIT_S).returncode == 0
    rollouts = out / "rollouts.jsonl"
    lines = rollouts.read_text().splitlines()
    rollouts.write_text("\n".join(lines + lines[:3]) + "\n")  # what two writers used to leave
    assert subprocess.run(collector_cmd(rows, out, "--resume"), env=env, cwd=REPO, timeout=WAIT_S).returncode == 0
    [agent] = json.loads((out / "rollouts_aggregate_metrics.json").read_text())
    assert sum(group["num_rollouts"] for group in agent["group_level_metrics"]) == 4


def example_stack(start_stack, **top_level):
    config = {**seed_verify_stack("example_single_tool_call"), **top_level}
    return start_stack(config, server_dirs={"example_single_tool_call": REPO / "server_images/example_single_tool_call"})


def collect_examples(stack, out: Path, parallel: int = 5):
    options = CollectOptions(input_path=EXAMPLE_ROWS, output_dir=out, num_samples_in_parallel=parallel,
                             request_timeout_s=60)
    return collect(stack.config, options)


def test_a_hung_model_fails_rollouts_naming_the_model_not_the_server_in_front(start_stack, tmp_path):
    stack = example_stack(start_stack, peer_request_timeout_seconds=4)
    model = stack.processes["policy_model"]
    model.send_signal(signal.SIGSTOP)  # what `docker pause` does
    try:
        result = collect_examples(stack, tmp_path / "out")
    finally:
        model.send_signal(signal.SIGCONT)
    assert result.failed == 5
    failures = read_jsonl(tmp_path / "out" / "rollouts_failures.jsonl")
    for failure in failures:
        assert failure["_ng_failure_type"] == "PeerTimeout"
        message = failure["_ng_failure_message"]
        assert message.startswith("policy_model did not answer POST /v1/responses within"), message
        assert "in agent" in message and "via environment" in message
        assert "answered 500" not in message


def test_a_dead_model_fails_its_rollouts_fast_naming_it(start_stack, tmp_path):
    stack = example_stack(start_stack, peer_connect_retry_seconds=1)
    stack.processes["policy_model"].kill()
    stack.processes["policy_model"].wait(timeout=WAIT_S)
    result = collect_examples(stack, tmp_path / "out")
    assert result.failed == 5
    for failure in read_jsonl(tmp_path / "out" / "rollouts_failures.jsonl"):
        assert failure["_ng_failure_type"] == "PeerConnectError"
        assert failure["_ng_failure_message"].startswith("cannot reach policy_model"), failure["_ng_failure_message"]
