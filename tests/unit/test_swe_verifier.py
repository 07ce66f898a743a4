"""The SWE verifier's session life cycle with stand-in sandboxes that are folders on this machine
(a fresh copy of a swebench_mini task's repository each, its commands run by the local bash, git
and Python with /app and /workspace pointed at the folder): the agent's sandbox is leased at seed
and handed over, its diff is taken and it is given back while a fresh sandbox scores the diff (the
verdict waits for neither give-back); hidden tests exist only in that fresh one; a dead sandbox
fails the rollout by name."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gym_compose.engine.images.task_repo import commit_repository
from gym_compose.paths import PROJECT_ROOT
from gym_compose.sandbox import SandboxExecResult
from gym_compose.server.context import ServerContext
from gym_compose.server.runtime import finish_app
from gym_compose.server.swe.verifier import SWEVerifier

MINI = PROJECT_ROOT / "benchmarks" / "swebench_mini"
ROW = json.loads((MINI / "data" / "swebench_mini.jsonl").read_text().splitlines()[0])
RESPONSE = {"id": "r", "created_at": 0, "model": "m", "object": "response", "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "output": []}
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


class FolderSandbox:
    """A sandbox of the row's image: the task repository at its base commit in a folder of its own."""

    counter = itertools.count()
    events: list[tuple[str, str]] = []
    stopping: asyncio.Event | None = None  # set: stop() waits for it (a release the engine is slow to do)

    def __init__(self, root: Path, dead: bool = False):
        self.root, self.dead = root, dead
        self.sandbox_id = f"sbx-{next(self.counter)}"
        self.spec = None

    def _local(self, text: str) -> str:
        places = {"/workspace": f"{self.home}/workspace", "/app": f"{self.home}/app", "/tmp/": f"{self.home}/tmp/"}
        return re.sub(r"(?<![\w.-])(/workspace|/app|/tmp/)", lambda match: places[match.group(1)], text)

    async def start(self, spec):
        self.spec, self.home = spec, self.root / self.sandbox_id
        commit_repository(MINI / "tasks" / ROW["dockerhub_tag"], self.home / "app")
        (self.home / "tmp").mkdir()
        for path, text in spec.files.items():
            target = Path(self._local(path))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(self._local(text) if path.endswith(".sh") else text)
        FolderSandbox.events.append(("start", spec.metadata["purpose"]))
        return self

    async def exec(self, command, cwd=None, timeout_s=None, **_):
        if self.dead:
            return SandboxExecResult("", "sandbox is dead: sandbox exited (exit code 137)", 125, "sandbox",
                                     "sandbox exited (exit code 137)")
        bin_dir = self.root / "bin"
        bin_dir.mkdir(exist_ok=True)
        if not (bin_dir / "python").exists():  # the sandbox's `python`: this one, with pytest
            (bin_dir / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
            (bin_dir / "python").chmod(0o755)
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        done = await asyncio.to_thread(subprocess.run, ["bash", "-c", self._local(command)], capture_output=True,
                                       text=True, timeout=timeout_s, env=env, cwd=self._local(cwd or "/app"))
        return SandboxExecResult(done.stdout, done.stderr, done.returncode)

    async def read_file(self, path):
        return Path(self._local(path)).read_bytes()

    async def serialize(self):
        return {"sandbox_id": self.sandbox_id, "grant": "g", "workdir": "/app"}

    async def stop(self):
        if FolderSandbox.stopping is not None:
            await FolderSandbox.stopping.wait()
        FolderSandbox.events.append(("stop", self.spec.metadata["purpose"]))


def verify_with(tmp_path, change=None, dead_agent=False, slow_stops=False, **config):
    FolderSandbox.events = []
    sandboxes: list[FolderSandbox] = []

    def new_sandbox(self):
        sandbox = FolderSandbox(tmp_path, dead=dead_agent and not sandboxes)
        sandboxes.append(sandbox)
        return sandbox

    server = SWEVerifier(config={"name": "swe", "image_repository": "swebench-mini", **config})
    server.__class__ = type("LocalVerifier", (SWEVerifier,), {"_new_sandbox": new_sandbox})
    context = ServerContext(name="swe", server_type="resources_servers", implementation="swebench_pro", spec={},
                            global_config={}, bind_host="127.0.0.1", port=0)
    app = finish_app(server.setup_webserver(), context, server)

    async def run():
        FolderSandbox.stopping = asyncio.Event() if slow_stops else None
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as client:
            seeded = await client.post("/seed_session", json=ROW)
            assert seeded.status_code == 200, seeded.text
            if change is not None:
                change(sandboxes[0].home / "app")
            try:
                # bounded: a verdict that waited for a slow give-back would never come
                verified = await asyncio.wait_for(client.post("/verify", json={**ROW, "response": RESPONSE}), 120)
            finally:
                if slow_stops:  # the verdict came while both sandboxes were still being given back
                    assert FolderSandbox.events == [("start", "agent"), ("start", "verify")]
                    FolderSandbox.stopping.set()
                await server.given_back()
            return seeded.json(), verified

    return (*asyncio.run(run()), sandboxes)


def changed_lines(patch: str) -> list[str]:
    return [line for line in patch.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def apply_reference(repository: Path) -> None:
    subprocess.run(["git", "apply"], input=ROW["patch"], text=True, cwd=repository, check=True)


def test_the_reference_fix_resolves_with_the_hidden_tests_only_in_the_fresh_sandbox(tmp_path):
    seed, verify, sandboxes = verify_with(tmp_path, apply_reference)
    assert seed["sandbox_descriptor"]["sandbox_id"] == sandboxes[0].sandbox_id and seed["workdir"] == "/app"
    assert seed["image_provenance"]["image"] == f"swebench-mini:{ROW['dockerhub_tag']}"
    assert sandboxes[0].spec.image == sandboxes[1].spec.image == f"swebench-mini:{ROW['dockerhub_tag']}"
    result = verify.json()
    assert verify.status_code == 200 and result["reward"] == 1.0 and result["resolved"] and result["patch_applied"]
    assert changed_lines(result["model_patch"]) == changed_lines(ROW["patch"])
    assert sorted(FolderSandbox.events) == [("start", "agent"), ("start", "verify"), ("stop", "agent"), ("stop", "verify")]
    assert FolderSandbox.events[0] == ("start", "agent") and FolderSandbox.events[-1] == ("stop", "verify")
    hidden = [path for path in ROW["selected_test_files_to_run"].strip('[]"').split('", "') if "order" in path]
    assert not (sandboxes[0].home / "app" / hidden[0]).exists() and (sandboxes[1].home / "app" / hidden[0]).exists()
    assert not sandboxes[0].spec.files and set(sandboxes[1].spec.files) >= {"/workspace/patch.diff",
                                                                               "/workspace/eval.sh"}


def test_the_verdict_does_not_wait_for_the_sandboxes_to_be_given_back(tmp_path):
    _, verify, _ = verify_with(tmp_path, apply_reference, slow_stops=True)
    assert verify.status_code == 200 and verify.json()["reward"] == 1.0
    assert sorted(FolderSandbox.events) == [("start", "agent"), ("start", "verify"), ("stop", "agent"), ("stop", "verify")]


def test_a_sandbox_starts_in_the_egress_phase_named_like_its_purpose_when_one_is_declared(tmp_path):
    phases = {"network": {"egress": {"allow": ["pypi.org"], "phases": {"verify": []}}}}
    _, verify, sandboxes = verify_with(tmp_path, apply_reference, sandbox_config=phases)
    assert verify.json()["reward"] == 1.0
    assert sandboxes[0].spec.provider_options == {} and sandboxes[1].spec.provider_options == {"phase": "verify"}
    _, _, plain = verify_with(tmp_path / "plain", apply_reference,
                              sandbox_config={"network": {"egress": {"allow": ["pypi.org"]}}})
    assert [sandbox.spec.provider_options for sandbox in plain] == [{}, {}]


def test_no_change_scores_zero_naming_the_failing_tests(tmp_path):
    _, verify, _ = verify_with(tmp_path)
    result = verify.json()
    assert result["reward"] == 0.0 and result["patch_applied"] and result["model_patch"] is None
    assert result["failed_tests"] == json.loads(ROW["fail_to_pass"])


def test_a_new_file_is_part_of_the_diff(tmp_path):
    def add_file(repository: Path) -> None:
        apply_reference(repository)
        (repository / "NOTES.md").write_text("notes\n")

    _, verify, _ = verify_with(tmp_path, add_file)
    assert verify.json()["resolved"] and "+++ b/NOTES.md" in verify.json()["model_patch"]


def test_golden_mode_scores_the_rows_own_patch(tmp_path):
    _, verify, _ = verify_with(tmp_path, is_verifying_golden_patch=True)
    assert verify.json()["reward"] == 1.0 and verify.json()["model_patch"] == ROW["patch"]


def test_a_dead_agent_sandbox_fails_the_rollout_by_name(tmp_path):
    FolderSandbox.events = []
    with pytest.raises(AssertionError, match="sbx-"):
        verify_with(tmp_path, dead_agent=True)
    assert FolderSandbox.events == [("start", "agent"), ("stop", "agent")]
