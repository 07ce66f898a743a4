"""The collector entry as a subprocess against fake environment servers on loopback.

The fake server is tests/support/fake_environment.py; `servers` (tests/protocol/conftest.py) starts it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.collector import collector_cmd, config_yaml, keys, read_jsonl, run_collector, write_rows

pytestmark = pytest.mark.protocol


def test_writes_exactly_one_row_per_rollout_and_the_artifacts(servers, tmp_path):
    port = servers("ok")
    rows = write_rows(tmp_path / "rows.jsonl", 30)
    out = tmp_path / "out"
    done = run_collector({"agent": port}, rows, out, "--num-repeats", "2", "--num-samples-in-parallel", "8",
                         "--temperature", "0.5")
    assert done.returncode == 0, done.stderr
    results = read_jsonl(out / "rollouts.jsonl")
    assert sorted(keys(results)) == [(t, r) for t in range(30) for r in range(2)]
    assert all(r["echo_rollout"] == r["_ng_rollout_index"] for r in results)
    assert all(r["responses_create_params"]["temperature"] == 0.5 for r in results)
    assert len(read_jsonl(out / "rollouts_materialized_inputs.jsonl")) == 60
    assert read_jsonl(out / "rollouts_failures.jsonl") == []
    [agent] = json.loads((out / "rollouts_aggregate_metrics.json").read_text())
    assert agent["agent_metrics"]["mean/reward"] == pytest.approx(0.5)
    assert agent["agent_metrics"]["pass@2/accuracy"] == pytest.approx(50.0)
    progress = json.loads((out / "progress.json").read_text())
    assert (progress["total"], progress["done"], progress["failed"], progress["finished"]) == (60, 60, 0, True)
    assert "60/60 rollouts succeeded" in done.stderr


def test_failed_rollouts_become_failure_rows_and_resume_retries_them(servers, tmp_path):
    port = servers("flaky")
    rows = write_rows(tmp_path / "rows.jsonl", 12)
    out = tmp_path / "out"
    first = run_collector({"agent": port}, rows, out)
    assert first.returncode == 1
    assert "8/12 rollouts succeeded, 4 failed" in first.stderr
    failures = read_jsonl(out / "rollouts_failures.jsonl")
    assert sorted(keys(failures)) == [(0, 0), (3, 0), (6, 0), (9, 0)]
    assert all(f["_ng_failure_http_status"] == 500 and "flaky failure" in f["_ng_failure_response_body"] for f in failures)
    second = run_collector({"agent": port}, rows, out, "--resume")
    assert second.returncode == 0, second.stderr
    assert sorted(keys(read_jsonl(out / "rollouts.jsonl"))) == [(t, 0) for t in range(12)]
    third = run_collector({"agent": port}, rows, out, "--resume")
    assert third.returncode == 0 and len(read_jsonl(out / "rollouts.jsonl")) == 12


def test_a_server_that_dies_mid_run_fails_only_its_rollouts(servers, tmp_path):
    ports = {"steady": servers("ok"), "doomed": servers("die")}
    rows = write_rows(tmp_path / "rows.jsonl", 40, agents=["steady", "doomed"])
    out = tmp_path / "out"
    done = run_collector(ports, rows, out, "--num-samples-in-parallel", "4", "--request-timeout", "10")
    assert done.returncode == 1
    results, failures = read_jsonl(out / "rollouts.jsonl"), read_jsonl(out / "rollouts_failures.jsonl")
    assert {r["agent_ref"]["name"] for r in results if r["_ng_task_index"] % 2 == 0} == {"steady"}
    assert sum(1 for r in results if r["agent_ref"]["name"] == "steady") == 20
    assert sum(1 for r in results if r["agent_ref"]["name"] == "doomed") <= 5
    assert len(results) + len(failures) == 40
    assert {f["agent_ref"]["name"] for f in failures} == {"doomed"}
    assert all(f["_ng_failure_class"] == "agent_request_failed" and f["_ng_failure_message"] for f in failures)


def test_resume_after_sigkill_yields_every_rollout_exactly_once(servers, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_SERVER_ANSWERS", "40")  # then it holds: the collector is killed mid-run
    port = servers("ok")
    monkeypatch.delenv("FAKE_SERVER_ANSWERS")
    rows = write_rows(tmp_path / "rows.jsonl", 300)
    out = tmp_path / "out"
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": config_yaml({"agent": port})}
    proc = subprocess.Popen(collector_cmd(rows, out, "--num-samples-in-parallel", "8"), env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(read_jsonl_lenient(out / "rollouts.jsonl")) < 40:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert len(read_jsonl_lenient(out / "rollouts.jsonl")) == 40  # the answered ones; 8 more were held
    fresh = servers("ok")
    resumed = run_collector({"agent": fresh}, rows, out, "--resume", "--num-samples-in-parallel", "8")
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(keys(read_jsonl(out / "rollouts.jsonl"))) == [(t, 0) for t in range(300)]


def read_jsonl_lenient(path: Path) -> list[str]:
    """Complete lines only: the collector may be mid-write."""
    if not path.exists():
        return []
    return [line for line in path.read_bytes().split(b"\n")[:-1] if line]


def test_bad_input_exits_2_before_any_rollout(servers, tmp_path):
    port = servers("ok")
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"responses_create_params": {"input": "a"}, "agent_ref": {"name": "agent"}}\n'
                    '{"responses_create_params": {"input": "b"}, "agent_ref": {"name": "nobody"}}\n')
    out = tmp_path / "out"
    done = run_collector({"agent": port}, rows, out)
    assert done.returncode == 2
    assert "line 2" in done.stderr and "'nobody'" in done.stderr and "agents there are: agent" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (out / "rollouts.jsonl").exists()
    rows.write_text('{"responses_create_params": {"input": "a"}}\nnot json\n')
    done = run_collector({"agent": port}, rows, out)
    assert done.returncode == 2 and "rows.jsonl, line 2: not valid JSON" in done.stderr
