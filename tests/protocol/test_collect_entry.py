"""The collector entry as a subprocess against fake environment servers on loopback.

Run as a script, this file is the fake server: `python test_collect_entry.py PORT MODE [DELAY_S]`.
MODE: ok (reward = task index % 2), flaky (500 on a first attempt of every third task),
die (exits hard after 5 requests, mid-request). With FAKE_SERVER_SEEN=FILE in its environment it
appends a line to FILE as each request arrives (so a test knows what is in flight); with
FAKE_SERVER_ANSWERS=N it answers the first N requests and holds every later one (a run that
cannot finish, so a fault lands mid-run whatever the machine's speed).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.protocol
HERE = Path(__file__).resolve()
REPO = HERE.parents[2]


# ---- the fake environment server (raw ASGI: the cheapest server, so timings show the collector) ----

def make_app(mode: str, delay_s: float):
    import asyncio

    import orjson

    served = {"count": 0}
    answers = int(os.environ.get("FAKE_SERVER_ANSWERS", "-1"))

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        served["count"] += 1
        if os.environ.get("FAKE_SERVER_SEEN"):
            with open(os.environ["FAKE_SERVER_SEEN"], "a") as seen:
                seen.write("request\n")
        if mode == "die" and served["count"] > 5:
            os._exit(1)
        if 0 <= answers < served["count"]:
            await asyncio.Event().wait()  # held until the process ends
        row = orjson.loads(body)
        if delay_s:
            await asyncio.sleep(delay_s)
        status = 200
        if mode == "flaky" and row["_ng_task_index"] % 3 == 0 and not row.get("_ng_attempt_index"):
            status, payload = 500, {"detail": "flaky failure"}
        else:
            payload = {"responses_create_params": row["responses_create_params"], "response": {"usage": {"input_tokens": 3}},
                       "reward": float(row["_ng_task_index"] % 2), "echo_rollout": row["_ng_rollout_index"]}
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": orjson.dumps(payload)})

    return app


if __name__ == "__main__":
    import uvicorn

    port, mode = int(sys.argv[1]), sys.argv[2]
    delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    uvicorn.run(make_app(mode, delay), host="127.0.0.1", port=port, log_level="warning", access_log=False)


# ---- helpers ----

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_fake_server(mode: str, delay_s: float = 0.0):
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(HERE), str(port), mode, str(delay_s)])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("fake environment server did not start within 20 s")


@pytest.fixture
def servers():
    started = []

    def start(mode: str, delay_s: float = 0.0) -> int:
        proc, port = start_fake_server(mode, delay_s)
        started.append(proc)
        return port

    yield start
    for proc in started:
        proc.kill()
        proc.wait(timeout=10)


def config_yaml(ports: dict[str, int]) -> str:
    """One environment server per agent: env_<agent> fronts <agent>."""
    import yaml

    config = {
        f"env_{agent}": {"environment_servers": {"fake_env": {
            "host": "127.0.0.1", "port": port, "agent_server": {"type": "responses_api_agents", "name": agent}}}}
        for agent, port in ports.items()
    }
    return yaml.safe_dump(config)


def write_rows(path: Path, n: int, agents: list[str] | None = None) -> Path:
    with path.open("w") as f:
        for i in range(n):
            row = {"responses_create_params": {"input": [{"role": "user", "content": f"q{i}"}]}}
            if agents:
                row["agent_ref"] = {"name": agents[i % len(agents)]}
            f.write(json.dumps(row) + "\n")
    return path


def collector_cmd(rows: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "gym_compose.collect", "--input", str(rows), "--output-dir", str(out), *extra]


def run_collector(ports, rows, out, *extra, timeout=120):
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": config_yaml(ports)}
    return subprocess.run(collector_cmd(rows, out, *extra), env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def keys(rows: list[dict]) -> list[tuple[int, int]]:
    return [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows]


# ---- tests ----

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
