"""python_sandbox: one sandbox per session (leased at seed, given back at verify), the tool's
output, the reward, and a sandbox failure turning the rollout into an error instead of a score.
The sandbox here is a stand-in that runs the code with the local Python; the Docker end-to-end
test (tests/e2e/test_sandboxes.py) runs it in real sandboxes."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gym_compose.sandbox import SandboxExecResult
from gym_compose.server.context import ServerContext
from gym_compose.server.runtime import finish_app
from gym_compose.server.testing import load_app as load_server_app

HERE = Path(__file__).resolve().parents[1]
ROW = json.loads((HERE / "data" / "example.jsonl").read_text().splitlines()[0])


class LocalSandbox:
    """Runs `python3 -I -c CODE` locally; `fail_with` makes every exec report that sandbox failure."""

    live: list["LocalSandbox"] = []

    def __init__(self, fail_with=None):
        self.fail_with, self.stopped, self.spec = fail_with, False, None

    async def start(self, spec=None):
        self.spec = spec
        LocalSandbox.live.append(self)
        return self

    async def exec(self, command, timeout_s=None, **kwargs):
        if self.fail_with:
            return SandboxExecResult(stdout="", stderr="killed", return_code=137, error_type="oom",
                                     reason=self.fail_with)
        code = command.split("-c ", 1)[1]
        done = subprocess.run(["sh", "-c", f"{sys.executable} -I -c {code}"], capture_output=True, text=True,
                              timeout=timeout_s)
        return SandboxExecResult(stdout=done.stdout, stderr=done.stderr, return_code=done.returncode)

    async def stop(self):
        self.stopped = True
        self.cost = {"leased_s": 1.5, "commands": 1, "cpu_s": 0.25}  # what the broker reports
        LocalSandbox.live.remove(self)


def final_text(text):
    return {"usage": {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17,
                      "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
            "id": "r", "created_at": 0, "model": "m", "object": "response", "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "output": [
                {"type": "message", "id": "m", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": text, "annotations": []}]}]}


def scenario(monkeypatch, fail_with=None, answer="24133"):
    app_module = load_server_app(HERE)
    monkeypatch.setattr(app_module.PythonSandboxServer, "_new_sandbox", lambda self: LocalSandbox(fail_with))
    server = app_module.PythonSandboxServer(config={"name": "python_sandbox"})
    context = ServerContext(name="python_sandbox", server_type="resources_servers", implementation="python_sandbox",
                            spec={}, global_config={}, bind_host="127.0.0.1", port=0)
    app = finish_app(server.setup_webserver(), context, server)  # as served: errors become JSON 500s

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as client:
            assert (await client.post("/seed_session", json=ROW)).status_code == 200
            assert len(LocalSandbox.live) == 1 and LocalSandbox.live[0].spec.metadata["session"]
            tool = await client.post("/run_python", json={"code": ROW["code"]})
            verify = await client.post("/verify", json={**ROW, "response": final_text(answer)})
            return tool, verify

    return asyncio.run(run())


def test_tool_runs_the_code_and_verify_scores_and_gives_the_sandbox_back(monkeypatch):
    tool, verify = scenario(monkeypatch)
    assert tool.json() == {"return_code": 0, "stdout": "24133\n", "stderr": ""}
    assert verify.status_code == 200 and verify.json()["reward"] == 1.0 and verify.json()["answered"] == "24133"
    assert verify.json()["cost"] == {"sandbox_leased_s": 1.5, "sandbox_commands": 1, "sandbox_cpu_s": 0.25,
                                     "model_input_tokens": 12, "model_output_tokens": 5}
    assert LocalSandbox.live == []


def test_a_wrong_answer_scores_zero(monkeypatch):
    _, verify = scenario(monkeypatch, answer="I ran it.\nAnswer: 24134")
    assert verify.json()["reward"] == 0.0 and verify.json()["answered"] == "24134"


def test_a_sandbox_failure_fails_the_rollout_with_its_reason(monkeypatch):
    tool, verify = scenario(monkeypatch, fail_with="sandbox OOM-killed (memory 256m)")
    assert tool.status_code == 500 and "sandbox OOM-killed (memory 256m)" in tool.text
    assert verify.status_code == 500 and "sandbox OOM-killed (memory 256m)" in verify.text
    assert LocalSandbox.live == []


@pytest.mark.parametrize("text, expected, same", [
    ("Answer: 1299", "1299", True), ("1299.0", "1299", True), ("lines\nfinal answer = 4", "4", True),
    ("4 letters", "4", False), ("", "4", False),
])
def test_final_answer_matching(text, expected, same):
    app_module = load_server_app(HERE)
    assert app_module.same_answer(app_module.final_answer(text), expected) is same
