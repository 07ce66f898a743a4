"""Helpers for the viewer's tests and bench/bench_view.py: synthetic run folders, a served
`gym-compose view`, and a headless Chromium (Debian's package, driven by Playwright).

A synthetic run folder has the collector's files in their real shapes (rollouts.jsonl lines
like a simple_agent + calculator rollout, rollouts_failures.jsonl, progress.json, the aggregate
metrics computed by the collector's own code, manifest.json), so the viewer reads it exactly
as it reads a real run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from gym_compose.metrics.agent_metrics import aggregate_metrics
from tests.support import REPO

ARTIFACTS = REPO / "test-artifacts"
AGENT = "calculator_simple_agent"
FAILURE_MESSAGE = "POST http://calculator-environment-server:8000/run answered 422"
CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def reward_of(task: int, rollout: int) -> float:
    """Deterministic and varied: some tasks always pass, some never, some sometimes."""
    kind = task % 4
    return [1.0, 0.0, float(rollout % 2 == 0), 1.0][kind]


def rollout_record(task: int, rollout: int, long_output: bool = False) -> dict[str, Any]:
    a, b = task % 97 + 2, task % 13 + 3
    expected = a * b
    reward = reward_of(task, rollout)
    answered = expected if reward else expected + 1
    call_id = f"call_{task:06d}_{rollout}"
    tool_output = json.dumps({"result": expected})
    if long_output:
        tool_output = json.dumps({"result": expected, "trace": [f"step {i}: multiply partial product {i * a}" for i in range(400)]})
    return {
        "responses_create_params": {
            "input": [
                {"role": "system", "content": "Use the calculate tool, then state the final number.", "type": "message"},
                {"role": "user", "content": f"What is {a} * {b}? (task {task})", "type": "message"},
            ],
            "tools": [{"type": "function", "name": "calculate", "description": "Evaluate an arithmetic expression",
                       "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                                      "required": ["expression"], "additionalProperties": False}, "strict": True}],
            "parallel_tool_calls": True, "tool_choice": "auto",
        },
        "expression": f"{a} * {b}",
        "expected_answer": expected,
        "agent_ref": {"name": AGENT},
        "_ng_task_index": task,
        "_ng_rollout_index": rollout,
        "response": {
            "id": f"resp_{task}_{rollout}", "created_at": 0.0, "model": "gym-compose-mock-model", "object": "response",
            "output": [
                {"arguments": json.dumps({"expression": f"{a} * {b}"}), "call_id": call_id, "name": "calculate",
                 "type": "function_call", "id": f"fc_{task}_{rollout}", "status": "completed"},
                {"call_id": call_id, "output": tool_output, "type": "function_call_output"},
                {"id": f"msg_{task}_{rollout}", "role": "assistant", "status": "completed", "type": "message",
                 "content": [{"text": str(answered), "type": "output_text", "annotations": []}]},
            ],
            "usage": {"input_tokens": 130 + task % 7, "output_tokens": 81, "total_tokens": 211 + task % 7},
            "status": "completed", "error": None,
        },
        "reward": reward,
        "mask_sample": False,
        "failure_kind": None,
        "failure_reason": None if reward else f"answered {answered}, expected {expected}",
        "answered": answered,
    }


def failure_record(task: int, rollout: int, attempt: int = 0) -> dict[str, Any]:
    return {
        "_ng_task_index": task, "_ng_rollout_index": rollout, "agent_ref": {"name": AGENT},
        "_ng_attempt_index": attempt, "_ng_environment_server": "calculator_environment_server",
        "_ng_failure_class": "agent_run_error", "_ng_failure_type": "HTTPStatusError",
        "_ng_failure_message": FAILURE_MESSAGE, "_ng_failure_http_status": 422,
        "_ng_failure_response_body": json.dumps({"detail": [{"loc": ["body", "responses_create_params", "input"],
                                                             "msg": "Input should be a valid list"}]}),
    }


def write_synthetic_run(folder: Path, tasks: int, repeats: int = 1, failed_tasks: tuple[int, ...] = (),
                        finished: bool = True, with_metrics: bool = True, long_output_task: int | None = None) -> Path:
    """A run folder of `tasks` x `repeats` rollouts; every rollout of `failed_tasks` failed (HTTP 422)."""
    folder.mkdir(parents=True, exist_ok=True)
    results, sent = [], []
    with open(folder / "rollouts.jsonl", "wb") as rollouts, open(folder / "rollouts_failures.jsonl", "wb") as failures:
        for task in range(tasks):
            for rollout in range(repeats):
                record = rollout_record(task, rollout, long_output=task == long_output_task)
                sent.append({k: v for k, v in record.items() if k not in ("response", "reward", "mask_sample", "failure_kind", "failure_reason", "answered")})
                if task in failed_tasks:
                    failures.write(orjson.dumps(failure_record(task, rollout)) + b"\n")
                    continue
                rollouts.write(orjson.dumps(record) + b"\n")
                if with_metrics:
                    results.append(record)
    (folder / "rollouts_materialized_inputs.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in sent))
    if with_metrics and finished:
        metrics = aggregate_metrics(results, sent, repeated=repeats > 1)
        (folder / "rollouts_aggregate_metrics.json").write_bytes(orjson.dumps(metrics))
    done = tasks * repeats - len(failed_tasks) * repeats
    rewards = [reward_of(t, r) for t in range(tasks) if t not in failed_tasks for r in range(repeats)]
    (folder / "progress.json").write_bytes(orjson.dumps({
        "total": tasks * repeats, "done": done, "failed": len(failed_tasks) * repeats, "rollouts_per_second": 40.0,
        "mean_reward": sum(rewards) / len(rewards) if rewards else None, "started_at": "2026-01-01T00:00:00+00:00",
        "finished": finished}))
    (folder / "manifest.json").write_text(json.dumps({
        "gym_compose_version": "0.1.0", "command": ["gym-compose", "up", "--resources-server", "calculator"],
        "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:01:00+00:00" if finished else None,
        "collector_exit_code": (1 if failed_tasks else 0) if finished else None,
        "images": {"base": {"image": "gym-compose/base:0123456789abcdef", "id": "sha256:" + "ab" * 32}},
        "compose_file": "compose.yaml",
        "resolved_config": {"policy_model": {"responses_api_models": {"mock_model": {"entrypoint": "app.py", "mode": "oracle"}}},
                            "calculator": {"resources_servers": {"calculator": {"entrypoint": "app.py", "api_key": "****"}}}},
    }))
    return folder


# ---------------------------------------------------------------------------------- the server

class ServedView:
    """`gym-compose view` as a user runs it, in a subprocess; `url` once it printed it."""

    def __init__(self, *folders: Path, extra: tuple[str, ...] = ()):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gym_compose", "view", *map(str, folders), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        )
        self.url = self._wait_for_url()

    def _wait_for_url(self, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()  # the URL line is the first thing on stdout
            if not line:
                break
            match = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
            if match:
                return match.group(1)
        self.stop()
        raise AssertionError(f"gym-compose view printed no URL; stderr:\n{self.process.stderr.read()[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)

    def __enter__(self) -> "ServedView":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# ---------------------------------------------------------------------------------- the browser

def chromium_executable() -> str | None:
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def launch_chromium(playwright):
    executable = chromium_executable()
    # --no-sandbox: CI and the developers' machines run as root, where Chromium's sandbox refuses to start
    return playwright.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])


def artifact_path(name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name


def in_ci() -> bool:
    return bool(os.environ.get("CI"))
