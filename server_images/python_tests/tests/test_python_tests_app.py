"""python_tests: the program is found in the answer and joined to the prompt; the harness runs it
against the hidden tests in a second process (here on the local Python, in a temporary folder
standing in for the sandbox; tests/e2e/test_benchmarks.py runs it in real sandboxes)."""

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
HARNESS = HERE / "harness.py"
ROWS = [json.loads(line) for line in (HERE / "data" / "example.jsonl").read_text().splitlines()]
ROW = ROWS[0]  # HumanEval/0, has_close_elements


@pytest.fixture(scope="module")
def app():
    return load_server_app(HERE)


def run_harness(tmp_path, program, time_limit_s=5.0, row=ROW):
    job = tmp_path / "job-x.json"
    job.write_text(json.dumps({"prompt": row["prompt"], "program": program, "test": row["test"],
                               "entry_point": row["entry_point"], "time_limit_s": time_limit_s}))
    done = subprocess.run([sys.executable, "-I", str(HARNESS), str(job)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), job.exists()


def test_extracts_the_last_python_block_else_a_plain_block_else_the_text(app):
    text = "First:\n```python\nx = 1\n```\nthen\n```\nplain\n```\nfinally\n```py\ndef f():\n    return 2\n```"
    assert app.extract_code(text) == "def f():\n    return 2\n"
    assert app.extract_code("```\ny = 3\n```") == "y = 3\n"
    assert app.extract_code("return 4") == "return 4"
    assert app.extract_code("  ") is None


def test_a_whole_function_follows_the_prompt_and_a_body_continues_it(app):
    prompt = "import math\n\ndef f(x):\n    \"\"\"doc\"\"\"\n"
    assert app.program_for(prompt, "def f(x):\n    return x\n", "f") == prompt + "\ndef f(x):\n    return x\n"
    assert app.program_for(prompt, "    return x\n", "f") == prompt + "    return x\n"


def test_the_reference_solution_passes_and_the_job_file_is_gone_before_it_runs(tmp_path):
    verdict, job_left = run_harness(tmp_path, ROW["prompt"] + ROW["canonical_solution"])
    assert verdict == {"passed": True, "reason": "every test passed"} and not job_left


@pytest.mark.parametrize("program, reason", [
    ("def has_close_elements(numbers, threshold):\n    return True\n", "a test failed: assert candidate("),
    ("def has_close_elements(numbers, threshold):\n    raise KeyError('k')\n", "the candidate raised KeyError: 'k'"),
    ("def has_close_elements(numbers, threshold)\n", "the program did not load: the candidate raised SyntaxError"),
    ("def has_close_elements(numbers, threshold):\n    return object()\n",
     "the candidate raised TypeError: a value of type object cannot cross to the tests"),
    ("import os\ndef has_close_elements(numbers, threshold):\n"
     "    return [n for n in os.listdir('.') if n.endswith('.json')]\n",
     "a test failed"),  # no job file left to find: a list, never the expected bool
    ("import os\nos._exit(3)\n", "the program did not load: the candidate's process exited with code 3"),
])
def test_a_wrong_or_broken_program_fails_with_the_reason(tmp_path, program, reason):
    verdict, _ = run_harness(tmp_path, program)
    assert verdict["passed"] is False and reason in verdict["reason"], verdict


@pytest.mark.parametrize("program", [
    "def has_close_elements(numbers, threshold):\n    while True:\n        pass\n",
    "while True:\n    pass\n",  # at load time
    "def has_close_elements(numbers, threshold):\n    try:\n        while True:\n            pass\n"
    "    except BaseException:\n        return True\n",
])
def test_a_program_past_its_time_limit_is_stopped(tmp_path, program):
    verdict, _ = run_harness(tmp_path, program, time_limit_s=0.5)
    assert verdict == {"passed": False, "outcome": "timeout",
                       "reason": "the program ran past its time limit of 0.5 s and was stopped"}


def test_values_cross_between_the_processes_as_tagged_json(tmp_path):
    namespace = {}
    exec(HARNESS.read_text().split("CODEC = r'''", 1)[1].split("'''", 1)[0], namespace)
    value = [1, 2.5, float("inf"), "s", None, True, (1, (2,)), {3, 4}, {"k": [1], 5: (6,)}, frozenset()]
    assert namespace["decode"](json.loads(json.dumps(namespace["encode"](value)))) == value


class LocalSandbox:
    """Runs the harness locally in a temporary folder; `exec_result` replaces the run when set."""

    def __init__(self, folder: Path, exec_result=None):
        self.folder, self.exec_result, self.stopped = folder, exec_result, False

    async def start(self, spec=None):
        return self

    async def write_file(self, path, data, mode=None):
        (self.folder / path).write_text(data)

    async def exec(self, command, timeout_s=None, **kwargs):
        if self.exec_result is not None:
            return self.exec_result
        done = subprocess.run([sys.executable, *command.split()[1:]], capture_output=True, text=True,
                              cwd=self.folder, timeout=timeout_s)
        return SandboxExecResult(stdout=done.stdout, stderr=done.stderr, return_code=done.returncode)

    async def stop(self):
        self.stopped = True


def answer(text):
    return {"id": "r", "created_at": 0, "model": "m", "object": "response", "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "output": [
                {"type": "message", "id": "m", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": text, "annotations": []}]}]}


def verify(app, monkeypatch, tmp_path, text, exec_result=None):
    sandboxes = []

    def new_sandbox(self):
        sandboxes.append(LocalSandbox(tmp_path, exec_result))
        return sandboxes[-1]

    monkeypatch.setattr(app.PythonTestsServer, "_new_sandbox", new_sandbox)
    server = app.PythonTestsServer(config={"name": "python_tests", "test_timeout_s": 5})
    context = ServerContext(name="python_tests", server_type="resources_servers", implementation="python_tests",
                            spec={}, global_config={}, bind_host="127.0.0.1", port=0)
    served = finish_app(server.setup_webserver(), context, server)

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url="http://s") as client:
            return await client.post("/verify", json={**ROW, "response": answer(text)})

    reply = asyncio.run(run())
    assert all(sandbox.stopped for sandbox in sandboxes)
    return reply


def test_verify_runs_the_answer_in_a_sandbox_and_gives_it_back(app, monkeypatch, tmp_path):
    right = verify(app, monkeypatch, tmp_path, f"```python\n{ROW['prompt']}{ROW['canonical_solution']}```").json()
    assert (right["reward"], right["outcome"], right["failure_reason"]) == (1.0, "passed", None)
    wrong = verify(app, monkeypatch, tmp_path, "```python\n    return False\n```").json()
    assert (wrong["reward"], wrong["outcome"]) == (0.0, "failed") and wrong["failure_reason"] == wrong["reason"]
    assert wrong["program"] == ROW["prompt"] + "    return False\n"
    empty = verify(app, monkeypatch, tmp_path, "").json()
    assert (empty["reward"], empty["outcome"], empty["program"]) == (0.0, "no_code", None)


def test_a_sandbox_that_dies_fails_the_rollout_unless_memory_killed_it(app, monkeypatch, tmp_path):
    dead = SandboxExecResult(stdout="", stderr="", return_code=125, error_type="sandbox",
                             reason="sandbox exited (exit code 1)")
    failed = verify(app, monkeypatch, tmp_path, "```python\n    return 1\n```", dead)
    assert failed.status_code == 500 and "sandbox exited (exit code 1)" in failed.text
    oom = SandboxExecResult(stdout="", stderr="", return_code=125, error_type="sandbox",
                            reason="sandbox OOM-killed (memory 256m)")
    scored = verify(app, monkeypatch, tmp_path, "```python\n    return 1\n```", oom).json()
    assert (scored["reward"], scored["outcome"], scored["reason"]) == (0.0, "oom", "sandbox OOM-killed (memory 256m)")
    hung = SandboxExecResult(stdout="", stderr="", return_code=124, error_type="timeout")
    stopped = verify(app, monkeypatch, tmp_path, "```python\n    return 1\n```", hung).json()
    assert stopped["outcome"] == "timeout" and "ran past 65 s" in stopped["reason"]
