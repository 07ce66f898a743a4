"""The shipped benchmarks end to end on the real engine, in one stack that serves all five:
the mock model's oracle scores every row 1.0 (with pass@k and majority@k when repeated), its
adversary scores every row 0.0 (blackjack: -1.0, a lost hand), and hostile HumanEval candidates
(reading the hidden tests, the network, a fork bomb, an endless loop, a memory hog) score 0.0
with the reason while the stack keeps serving."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.e2e import why_rollouts_failed
from tests.support.ports import free_port

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "gym_compose"]
BENCHMARKS = ["gsm8k", "math-500", "human_eval", "blackjack", "example_single_tool_call"]
AGENTS = {  # benchmark agent -> (its benchmark's rows, the adversary's reward)
    "gsm8k_math_answer_simple_agent": ("gsm8k/data/gsm8k_subset.jsonl", 0.0),
    "math_500_math_answer_simple_agent": ("math-500/data/math-500_subset.jsonl", 0.0),
    "human_eval_python_tests_simple_agent": ("human_eval/data/human_eval_subset.jsonl", 0.0),
    "blackjack_benchmark_gymnasium_agent": ("blackjack/data/blackjack_subset.jsonl", -1.0),
    "example_single_tool_call_benchmark_simple_agent": (None, 0.0),
}
TEST_TIMEOUT_S = 8
CONFIG = [arg for name in BENCHMARKS for arg in ("--benchmark", name)] + [
    f"++human_eval_python_tests_resources_server.resources_servers.python_tests.test_timeout_s={TEST_TIMEOUT_S}"]



def gym_compose(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


class Stack:
    def __init__(self, project: str, head_port: int, workdir: Path):
        self.project, self.head_port, self.workdir = project, head_port, workdir

    def collect(self, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
        results = self.workdir / "results"
        before = set(results.glob("*")) if results.exists() else set()
        done = gym_compose("eval", "run", "--no-serve", "-p", self.project, "--head-port", str(self.head_port),
                           *CONFIG, "--results-dir", str(results), *extra, cwd=REPO)
        (run_dir,) = set(results.glob("*")) - before
        return done, run_dir


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("benchmarks")
    project, head_port = f"{PROJECT_PREFIX}-benchmarks", free_port()
    up = gym_compose("up", "-d", "-p", project, "--head-port", str(head_port), *CONFIG, cwd=REPO)
    try:
        assert up.returncode == 0, up.stderr
        yield Stack(project, head_port, workdir)
    finally:
        gym_compose("down", "-p", project, cwd=REPO)


@pytest.fixture(scope="module")
def oracle_run(stack) -> Path:
    done, run_dir = stack.collect("--num-repeats", "2", "--run-name", "oracle")
    assert done.returncode == 0, done.stderr + (run_dir / "collector.log").read_text() + why_rollouts_failed(run_dir)
    return run_dir


def by_agent(rollouts: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for rollout in rollouts:
        grouped.setdefault(rollout["agent_ref"]["name"], []).append(rollout)
    return grouped


def test_oracle_scores_every_row_of_every_benchmark_one_with_pass_at_k(oracle_run):
    grouped = by_agent(read_jsonl(oracle_run / "rollouts.jsonl"))
    assert set(grouped) == set(AGENTS)
    for agent, (rows_file, _) in AGENTS.items():
        expected_rows = len(read_jsonl(REPO / "benchmarks" / rows_file)) if rows_file else 5
        assert len(grouped[agent]) == 2 * expected_rows, agent
        assert {rollout["reward"] for rollout in grouped[agent]} == {1.0}, agent
    metrics = {entry["agent_ref"]["name"]: entry["agent_metrics"]
               for entry in json.loads((oracle_run / "rollouts_aggregate_metrics.json").read_text())}
    for agent in AGENTS:
        assert metrics[agent]["pass@2/accuracy"] == 100.0 or metrics[agent]["pass@2/accuracy"] == 1.0, metrics[agent]
        assert metrics[agent]["pass@1[avg-of-2]/accuracy"] in (1.0, 100.0), agent
    for agent in ("gsm8k_math_answer_simple_agent", "math_500_math_answer_simple_agent"):
        assert metrics[agent]["majority@2/accuracy"] in (1.0, 100.0), agent
    checked = [rollout for rollout in grouped["math_500_math_answer_simple_agent"] if rollout["extraction"] == "boxed"]
    assert len(checked) == len(grouped["math_500_math_answer_simple_agent"])
    assert all(rollout["outcome"] == "passed" for rollout in grouped["human_eval_python_tests_simple_agent"])


def adversary_rows(oracle_run: Path) -> list[dict]:
    rows = read_jsonl(oracle_run / "input.jsonl")
    for row in rows:
        row["responses_create_params"].setdefault("metadata", {})["gym_mock_mode"] = "adversary"
    return rows


def test_adversary_scores_every_row_zero(stack, oracle_run):
    rows_file = stack.workdir / "adversary.jsonl"
    rows_file.write_text("".join(json.dumps(row) + "\n" for row in adversary_rows(oracle_run)))
    done, run_dir = stack.collect("--input", str(rows_file))
    assert done.returncode == 0, done.stderr + why_rollouts_failed(run_dir)
    grouped = by_agent(read_jsonl(run_dir / "rollouts.jsonl"))
    assert set(grouped) == set(AGENTS)
    for agent, (_, lowest) in AGENTS.items():
        assert {rollout["reward"] for rollout in grouped[agent]} == {lowest}, agent
    assert {rollout["outcome"] for rollout in grouped["human_eval_python_tests_simple_agent"]} == {"failed"}


HOSTILE = {
    "reads the hidden tests": '''import os


def has_close_elements(numbers, threshold):
    for name in os.listdir("."):  # the job file with the tests, next to the harness?
        if name.endswith(".json"):
            return eval(open(name).read())
    with open(f"/proc/{os.getppid()}/mem", "rb") as judge:  # then the judge's memory
        return judge.read(1)
''',
    "opens a network connection": '''import socket


def has_close_elements(numbers, threshold):
    socket.create_connection(("head", 11000), timeout=5).close()
    return True
''',
    "forks without bound": '''import os

while True:
    os.fork()
''',
    "loops forever": '''def has_close_elements(numbers, threshold):
    while True:
        pass
''',
    "eats memory": '''def has_close_elements(numbers, threshold):
    hog = bytearray(1 << 30)
    return len(hog) > 0
''',
}
REASONS = {
    "reads the hidden tests": ("failed", "PermissionError"),
    "opens a network connection": ("failed", "gaierror"),
    "loops forever": ("timeout", f"time limit of {TEST_TIMEOUT_S} s"),
}


def test_hostile_candidates_score_zero_with_the_reason_and_the_stack_keeps_serving(stack):
    example = read_jsonl(REPO / "server_images" / "python_tests" / "data" / "example.jsonl")
    assert example[0]["entry_point"] == "has_close_elements"
    rows = []
    for name, program in HOSTILE.items():
        row = json.loads(json.dumps(example[0]))
        row["agent_ref"] = {"name": "human_eval_python_tests_simple_agent"}
        row["responses_create_params"]["metadata"] = {
            "gym_mock_script": json.dumps([{"text": f"```python\n{program}```"}]), "hostile": name}
        rows.append(row)
    for row in example[1:4]:  # and honest rows after them, answered by the oracle
        rows.append({**row, "agent_ref": {"name": "human_eval_python_tests_simple_agent"}})
    rows_file = stack.workdir / "hostile.jsonl"
    rows_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    done, run_dir = stack.collect("--input", str(rows_file), "--num-samples-in-parallel", "4")
    assert done.returncode == 0, done.stderr + (run_dir / "collector.log").read_text() + why_rollouts_failed(run_dir)
    rollouts = read_jsonl(run_dir / "rollouts.jsonl")
    hostile = {row["responses_create_params"]["metadata"]["hostile"]: row
               for row in rollouts if "hostile" in (row["responses_create_params"].get("metadata") or {})}
    assert set(hostile) == set(HOSTILE)
    for name, rollout in hostile.items():
        assert rollout["reward"] == 0.0, (name, rollout["reason"])
        assert rollout["reason"] and rollout["failure_reason"] == rollout["reason"], name
    for name, (outcome, words) in REASONS.items():
        assert hostile[name]["outcome"] == outcome and words in hostile[name]["reason"], (name, hostile[name]["reason"])
    assert hostile["eats memory"]["outcome"] in ("oom", "failed"), hostile["eats memory"]["reason"]
    assert "killed" in hostile["eats memory"]["reason"], hostile["eats memory"]["reason"]
    honest = [row for row in rollouts if "hostile" not in (row["responses_create_params"].get("metadata") or {})]
    assert [row["reward"] for row in honest] == [1.0] * 3
    ps = gym_compose("ps", "-p", stack.project, cwd=REPO)
    assert ps.returncode == 0
    services = [line for line in ps.stdout.splitlines()[1:] if line.strip() and not line.startswith(stack.project)]
    assert services and all(" running  healthy" in line for line in services if "  running" in line), ps.stdout
