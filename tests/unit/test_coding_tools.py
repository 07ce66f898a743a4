"""The coding agent's tools against a stand-in sandbox that runs commands on this machine in a
folder: real bash, real files; the output cap, the per-command limit, the editor's commands and
its refusals, and a dead sandbox ending the episode."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from gym_compose.sandbox.types import SandboxDeadError, SandboxExecResult
from gym_compose.server.agents.coding_tools import BASH, EDITOR, SUBMIT, TOOLS, SandboxLost, ToolLimits, ToolRunner


class LocalSandbox:
    """exec, read_file and write_file of AsyncSandbox, on the local machine."""

    sandbox_id = "local-sandbox"

    def __init__(self, dead: bool = False):
        self.dead = dead

    async def exec(self, command, cwd=None, timeout_s=None, **_):
        if self.dead:
            return SandboxExecResult("", "sandbox is dead: sandbox exited (exit code 137)", 125, "sandbox",
                                     "sandbox exited (exit code 137)")
        try:
            done = await asyncio.to_thread(subprocess.run, ["bash", "-c", command], cwd=cwd, capture_output=True,
                                           text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as expired:
            return SandboxExecResult((expired.stdout or b"").decode(), "", 124, "timeout", "timed out")
        return SandboxExecResult(done.stdout, done.stderr, done.returncode)

    async def read_file(self, path):
        if self.dead:
            raise SandboxDeadError("sandbox exited (exit code 137)")
        return Path(path).read_bytes()

    async def write_file(self, path, data, mode=None):
        Path(path).write_text(data)


def runner(tmp_path: Path, **limits) -> ToolRunner:
    return ToolRunner(LocalSandbox(), ToolLimits(workdir=str(tmp_path), **limits))


def call(tool_runner: ToolRunner, name: str, **arguments) -> str:
    return asyncio.run(tool_runner.run(name, arguments))


def test_the_tool_schemas_are_the_three_tools():
    assert [tool["name"] for tool in TOOLS] == [BASH, EDITOR, SUBMIT]
    assert all(tool["parameters"]["type"] == "object" for tool in TOOLS)


def test_bash_reports_the_exit_code_and_both_streams(tmp_path):
    tools = runner(tmp_path)
    assert call(tools, BASH, command="echo out; echo err >&2; exit 3") == "exit code 3\nout\n\n[stderr]\nerr"
    assert call(tools, BASH, command="pwd") == f"exit code 0\n{tmp_path}"
    assert call(tools, BASH, command="  ").startswith("error: `command`")


def test_long_output_keeps_head_and_tail(tmp_path):
    answer = call(runner(tmp_path, max_output_chars=100), BASH, command="seq 1 10000")
    assert answer.startswith("exit code 0\n1\n2\n") and answer.endswith("9999\n10000")
    assert "characters cut" in answer and len(answer) < 200


def test_a_command_past_its_limit_is_stopped_and_said(tmp_path):
    tools = runner(tmp_path, command_timeout_s=30)
    answer = call(tools, BASH, command="echo begun; sleep 20", timeout_s=0.5)
    assert answer.startswith("the command ran longer than 0.5 s and was stopped") and tools.timeouts == 1


def test_the_editor_views_creates_replaces_and_inserts(tmp_path):
    tools = runner(tmp_path)
    assert call(tools, EDITOR, command="create", path="pkg/mod.py", file_text="a = 1\nb = 2\n").startswith("created")
    assert (tmp_path / "pkg" / "mod.py").read_text() == "a = 1\nb = 2\n"
    assert call(tools, EDITOR, command="view", path="pkg/mod.py") == f"{tmp_path}/pkg/mod.py (lines 1-2 of 2):\n" \
        "     1\ta = 1\n     2\tb = 2"
    assert call(tools, EDITOR, command="str_replace", path="pkg/mod.py", old_str="b = 2",
                new_str="b = 3").startswith("replaced 1")
    inserted = call(tools, EDITOR, command="insert", path="pkg/mod.py", insert_line=0, new_str="# top")
    assert inserted.startswith("inserted")
    assert (tmp_path / "pkg" / "mod.py").read_text() == "# top\na = 1\nb = 3\n"
    assert call(tools, EDITOR, command="view", path="pkg/mod.py", view_range=[2, 2]).endswith("     2\ta = 1")


def test_the_editor_refuses_what_it_cannot_do_exactly(tmp_path):
    tools = runner(tmp_path)
    (tmp_path / "f.py").write_text("x = 1\nx = 1\n")
    assert "occurs 2 times" in call(tools, EDITOR, command="str_replace", path="f.py", old_str="x = 1", new_str="y")
    assert "occurs 0 times" in call(tools, EDITOR, command="str_replace", path="f.py", old_str="zzz", new_str="y")
    assert "does not exist" in call(tools, EDITOR, command="view", path="missing.py")
    assert "must be one of" in call(tools, EDITOR, command="delete", path="f.py")
    assert "between 0 and 2" in call(tools, EDITOR, command="insert", path="f.py", insert_line=9, new_str="z")
    assert (tmp_path / "f.py").read_text() == "x = 1\nx = 1\n"
    assert call(tools, SUBMIT) == "submitted" and "unknown tool" in call(tools, "rm_rf")


def test_a_dead_sandbox_ends_the_episode_naming_it(tmp_path):
    tools = ToolRunner(LocalSandbox(dead=True), ToolLimits(workdir=str(tmp_path)))
    with pytest.raises(SandboxLost, match="sandbox local-sandbox is dead: sandbox exited"):
        call(tools, BASH, command="true")
    with pytest.raises(SandboxLost, match="local-sandbox"):
        call(tools, EDITOR, command="view", path="f.py")
