"""End-to-end SWE tasks on the real engine (docs/swe.md): `gym-compose up --benchmark swebench_mini`
with the mock model scores 1.0 on every row (oracle) and writes every artifact; the adversary scores
0.0 on every row; a patch that does not apply scores 0.0 with patch_applied false; a hanging test
command is stopped at its limit and recorded; a sandbox killed mid-rollout becomes a failure row
naming it and --resume finishes the run with every rollout once, or, for an agent that checkpoints,
goes on from the rollout's last checkpoint; swebench_pro on a machine with no
registry and no rows says so and starts nothing. One stack serves all but the last."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.e2e import labelled as networks_left
from tests.support.waiting import wait_for

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "gym_compose"]
MINI_ROWS = REPO / "benchmarks" / "swebench_mini" / "data" / "swebench_mini.jsonl"
CHECKS = Path(__file__).with_name("swebench_checks.yaml")
LABEL = "io.gym-compose.project"
STACK = ["--benchmark", "swebench_mini", "--config", str(CHECKS)]


def run(*argv: str, timeout: float = 900, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kwargs)


def mini_rows(agent: str = "swebench_mini_coding_agent") -> list[dict]:
    return [{**json.loads(line), "agent_ref": {"name": agent}} for line in MINI_ROWS.read_text().splitlines()]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def labelled(project: str, *listing: str) -> list[str]:
    return run("docker", *listing, "--filter", f"label={LABEL}={project}", timeout=60).stdout.split()


@dataclass
class Stack:
    project: str
    head_port: int
    workdir: Path
    first_run: Path
    up: subprocess.CompletedProcess

    @property
    def results(self) -> Path:
        return self.workdir / "results"

    def collect(self, rows: Path, *extra: str, name: str | None = None) -> tuple[subprocess.CompletedProcess, Path]:
        before = set(self.results.glob("*"))
        done = run(*CLI, "eval", "run", "--no-serve", "-p", self.project, "--head-port", str(self.head_port), *STACK,
                   "--input", str(rows), "--results-dir", str(self.results), *(["--run-name", name] if name else []),
                   *extra, cwd=self.workdir)
        made = set(self.results.glob("*")) - before
        return done, (made.pop() if made else max(self.results.glob(f"{name}-*")))


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("swebench")
    project = f"gce2e-swe-{os.getpid()}"
    head_port = 20000 + os.getpid() % 20000
    up = run(*CLI, "up", *STACK, "--keep", "-p", project, "--head-port", str(head_port),
             "--results-dir", str(workdir / "results"), cwd=workdir, timeout=1800)
    runs = list((workdir / "results").glob("swebench_mini-*"))
    try:
        assert up.returncode == 0, up.stderr[-4000:]
        yield Stack(project, head_port, workdir, runs[0], up)
    finally:
        run(*CLI, "down", "-p", project, cwd=workdir)
        assert labelled(project, "ps", "-aq") == [], "sandboxes or servers left after down"


def test_oracle_resolves_every_row_and_writes_every_artifact(stack):
    rows = read_rows(stack.first_run / "rollouts.jsonl")
    instances = [row["instance_id"] for row in mini_rows()]
    assert sorted(row["instance_id"] for row in rows) == sorted(instances)
    assert all(row["reward"] == 1.0 and row["resolved"] and row["patch_applied"] for row in rows), \
        [(row["instance_id"], row["error"], row["failed_tests"]) for row in rows if row["reward"] != 1.0]
    for row in rows:  # the trajectory: the tool calls and their outputs, as NeMo Gym records them
        kinds = [item["type"] for item in row["response"]["output"]]
        assert kinds.count("function_call") == kinds.count("function_call_output") >= 3
        assert row["response"]["output"][-2]["name"] == "submit"
        assert row["model_patch"].startswith("diff --git")
        assert row["timings"]["lease_s"] > 0 and row["timings"]["tests_s"] > 0
    for name in ("rollouts_materialized_inputs.jsonl", "rollouts_aggregate_metrics.json", "manifest.json",
                 "compose.yaml", "input.jsonl", "collector.log"):
        assert (stack.first_run / name).is_file(), name
    assert not read_rows(stack.first_run / "rollouts_failures.jsonl")
    manifest = json.loads((stack.first_run / "manifest.json").read_text())
    task_images = [key for key in manifest["images"] if key.startswith("task-image:swebench_mini_resources_server:")]
    assert len(task_images) == len(instances) and all(manifest["images"][k]["id"] for k in task_images)
    assert "mean/reward" in stack.first_run.joinpath("rollouts_aggregate_metrics.json").read_text()
    assert "mean reward 1.000" in stack.up.stderr


def test_adversary_scores_zero_on_every_row(stack):
    rows = mini_rows()
    for row in rows:
        row["responses_create_params"]["metadata"] = {"gym_mock_mode": "adversary"}
    done, run_dir = stack.collect(write_rows(stack.workdir / "adversary.jsonl", rows))
    assert done.returncode == 0, done.stderr[-3000:]
    scored = read_rows(run_dir / "rollouts.jsonl")
    assert len(scored) == len(rows)
    assert all(row["reward"] == 0.0 and row["patch_applied"] and not row["resolved"] and row["failed_tests"]
               for row in scored)


def test_a_patch_that_does_not_apply_and_a_hanging_test_command(stack):
    broken, hanging = mini_rows("swebench_checks_coding_agent")[:2]
    # a line to remove that is not in the file: neither git apply nor GNU patch (with fuzz) takes it
    broken["patch"] = re.sub(r"\n-(?!--)", "\n-#not in the file ", broken["patch"], count=1)
    hanging["run_script"] = "#!/bin/bash\necho started\nsleep 600\n"
    done, run_dir = stack.collect(write_rows(stack.workdir / "checks.jsonl", [broken, hanging]))
    assert done.returncode == 0, done.stderr[-3000:]
    scored = {row["instance_id"]: row for row in read_rows(run_dir / "rollouts.jsonl")}
    not_applied, hung = scored[broken["instance_id"]], scored[hanging["instance_id"]]
    assert not_applied["reward"] == 0.0 and not_applied["patch_applied"] is False
    assert "does not apply" in not_applied["error"]
    assert hung["reward"] == 0.0 and hung["eval_timed_out"] is True and hung["patch_applied"] is True
    assert "time limit (20 s)" in hung["error"] and "started" in hung["test_output"]
    assert not_applied["agent_checkpoints"] >= 1 and "agent_resumed_from_step" not in not_applied
    assert hung["timings"]["tests_s"] < 120  # stopped at its limit, not after the sleep
    # this agent worked through the model's chat completions: the same trajectory items
    outputs = [item["output"] for item in not_applied["response"]["output"] if item["type"] == "function_call_output"]
    assert outputs[0].startswith("exit code 0") and outputs[-1] == "submitted"
    assert any(output.startswith("exit code 1") and "patch" in output for output in outputs)  # the mock's git apply


def collect_killing_the_sandbox(stack: Stack, rows: Path, name: str, slow: dict) -> tuple[str, Path]:
    """A run of `rows` in which the sandbox of row `slow` is killed while it runs `sleep 15` (its
    script's step, so the kill lands mid-rollout by construction); the victim's name and the run folder."""
    before = set(stack.results.glob("*"))
    collector = subprocess.Popen([*CLI, "eval", "run", "--no-serve", "-p", stack.project, "--head-port",
                                  str(stack.head_port), *STACK, "--input", str(rows), "--results-dir",
                                  str(stack.results), "--run-name", name],
                                 cwd=stack.workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = None
    deadline = time.monotonic() + 300
    while victim is None and time.monotonic() < deadline and collector.poll() is None:
        for container in labelled(stack.project, "ps", "-q", "--filter", "label=io.gym-compose.sandbox"):
            image = run("docker", "inspect", "-f", '{{index .Config.Labels "io.gym-compose.sandbox.image"}}',
                        container, timeout=60).stdout
            top = run("docker", "top", container, timeout=60).stdout
            if f":{slow['dockerhub_tag']}-" in image and "sleep 15" in top:
                victim = run("docker", "inspect", "-f", "{{.Name}}", container, timeout=60).stdout.strip().lstrip("/")
                run("docker", "kill", container, timeout=60)
                break
        time.sleep(0.5)
    out, err = collector.communicate(timeout=600)
    assert victim, f"the slow rollout's sandbox never showed up: {err[-2000:]}"
    assert collector.returncode == 1, err[-3000:]
    (run_dir,) = set(stack.results.glob("*")) - before
    return victim, run_dir


def test_a_killed_sandbox_fails_its_rollout_by_name_and_resume_finishes(stack):
    slow, other = mini_rows()[2:4]
    slow["responses_create_params"]["metadata"] = {
        "gym_mock_script": json.dumps([{"tool": "bash", "arguments": {"command": "sleep 15"}}])}
    rows = write_rows(stack.workdir / "kill.jsonl", [slow, other])
    victim, run_dir = collect_killing_the_sandbox(stack, rows, "killed", slow)
    failures = read_rows(run_dir / "rollouts_failures.jsonl")
    assert len(failures) == 1 and victim in json.dumps(failures[0]), failures
    assert len(read_rows(run_dir / "rollouts.jsonl")) == 1

    done, resumed_dir = stack.collect(rows, "--resume", name="killed")
    assert done.returncode == 0, done.stderr[-3000:]
    assert resumed_dir == run_dir
    finished = read_rows(run_dir / "rollouts.jsonl")
    keys = [(row["_ng_task_index"], row["_ng_rollout_index"]) for row in finished]
    assert sorted(keys) == [(0, 0), (1, 0)], keys  # every rollout exactly once
    assert all(row["reward"] == 1.0 for row in finished)


def test_after_a_crash_resume_goes_on_from_the_rollouts_last_checkpoint(stack):
    """swebench_checks_coding_agent checkpoints after every step (checkpoint_every: 1): the rerun
    of a rollout whose sandbox was killed at its second step starts at that step, in a sandbox
    restored to the files of the first (which it does not run again), with the transcript so far."""
    (slow,) = mini_rows("swebench_checks_coding_agent")[4:5]
    slow["responses_create_params"]["metadata"] = {"gym_mock_script": json.dumps([
        {"tool": "bash", "arguments": {"command": "echo written-before-the-crash > /var/tmp/checkpointed"}},
        {"tool": "bash", "arguments": {"command": "sleep 15"}},
        {"tool": "bash", "arguments": {"command": "cat /var/tmp/checkpointed"}}])}
    rows = write_rows(stack.workdir / "checkpoint.jsonl", [slow])
    _, run_dir = collect_killing_the_sandbox(stack, rows, "checkpointed", slow)
    assert read_rows(run_dir / "rollouts.jsonl") == []

    done, resumed_dir = stack.collect(rows, "--resume", name="checkpointed")
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = read_rows(run_dir / "rollouts.jsonl")
    assert resumed_dir == run_dir and row["reward"] == 1.0, row.get("error")
    assert row["agent_resumed_from_step"] == 1 and row["agent_checkpoints"] >= 1
    calls = [json.loads(item["arguments"]).get("command") for item in row["response"]["output"]
             if item["type"] == "function_call"]
    outputs = [item["output"] for item in row["response"]["output"] if item["type"] == "function_call_output"]
    # the saved step, then the one the kill cut short, run again: each once in the transcript
    assert calls[:3] == ["echo written-before-the-crash > /var/tmp/checkpointed", "sleep 15",
                         "cat /var/tmp/checkpointed"], calls
    assert calls.count("sleep 15") == 1 and calls[-1] is None, calls  # ... and the mock's submit
    assert outputs[2] == "exit code 0\nwritten-before-the-crash", outputs
    # the episode forgot its checkpoint: no snapshot of the project is left once the verifier has
    # given back the sandbox restored from it (in the background, after the row is written)
    wait_for(lambda: labelled(stack.project, "images", "-q", "--filter", "label=io.gym-compose.snapshot") == [],
             "the checkpoint's snapshot image to be removed", timeout=120, interval=1)


def test_swebench_pro_without_a_registry_says_what_is_missing_and_starts_nothing(tmp_path):
    project = f"gce2e-swepro-{os.getpid()}"
    done = run(*CLI, "up", "--benchmark", "swebench_pro", "-p", project, "--results-dir", str(tmp_path / "results"),
               "++swebench_pro_resources_server.resources_servers.swebench_pro.image_repository="
               "registry.invalid/sweap-images",
               "++swebench_pro_coding_agent.responses_api_agents.coding_agent.datasets.0.jsonl_fpath="
               f"{tmp_path}/not-prepared.jsonl", cwd=tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "no prepared rows" in done.stderr and "not-prepared.jsonl" in done.stderr
    assert "no container registry: registry.invalid cannot be reached" in done.stderr
    assert "gym-compose up --benchmark swebench_mini" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "results").exists()
    assert labelled(project, "ps", "-aq") == [] and networks_left("network", project) == []
