"""One owner per project name (issue 22): a second `up`/`eval run` of a project that another
command is creating is refused before it creates or removes anything. The second command is
made to arrive while the first holds the project by construction: a gate the first waits on, or
a child process that holds the lock until told to let go; no timing decides the outcome."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gym_compose.config.request import ConfigRequest
from gym_compose.errors import UserError
from gym_compose.plan.model import StackOptions
from gym_compose.stack import lifecycle, state
from gym_compose.stack.lifecycle import StackArgs, up_command
from gym_compose.stack.state import ProjectBusy, owner_lock_path, owning_project

REPO = Path(__file__).resolve().parents[2]
HOLD_LOCK = """
import sys
from gym_compose.stack.state import owning_project
with owning_project(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture(autouse=True)
def _own_state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(state.STATE_DIR_ENV, str(tmp_path / "state"))


def stack_args(project: str) -> StackArgs:
    return StackArgs(ConfigRequest(resources_servers=["example_single_tool_call"]), StackOptions(project=project))


class EngineCalls:
    """Stands in for every engine call of `up`, recording them; `gate`, when set, holds the
    first command inside its build until the test opens it."""

    def __init__(self, monkeypatch, gate: threading.Event | None = None):
        self.calls: list[tuple[str, str]] = []
        self.building = threading.Event()
        self.gate = gate
        monkeypatch.setattr(lifecycle, "refuse_if_running", lambda name, target="compose": self.calls.append(
            ("refuse_if_running", name)))
        monkeypatch.setattr(lifecycle, "build_and_render", self.build_and_render)
        monkeypatch.setattr(lifecycle, "start_servers", lambda stack, project: self.calls.append(
            ("start_servers", stack.project)))
        monkeypatch.setattr(lifecycle, "down_quietly", lambda project: self.calls.append(("down", project.name)))

    def build_and_render(self, stack, target, out_dir):
        from gym_compose.engine.targets.compose_project import ComposeProject

        self.calls.append(("build_and_render", stack.project))
        first = not self.building.is_set()
        self.building.set()
        if self.gate is not None and first:
            assert self.gate.wait(60), "the test never opened the gate"
        return {}, ComposeProject(stack.project, None)


def test_a_second_up_while_the_first_is_creating_the_stack_is_refused_and_removes_nothing(monkeypatch):
    gate = threading.Event()
    engine = EngineCalls(monkeypatch, gate)
    first_error: list[BaseException] = []

    def first() -> None:
        try:
            up_command(stack_args("race"), detach=True)
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            first_error.append(error)

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert engine.building.wait(60), "the first up never reached its build"
        calls_before = list(engine.calls)
        with pytest.raises(ProjectBusy, match="project 'race' is being started or run by pid") as refused:
            up_command(stack_args("race"), detach=True)
        assert engine.calls == calls_before  # the second asked nothing of the engine: no check, no down
        assert "-p NAME" in str(refused.value)
    finally:
        gate.set()
        thread.join(60)
    assert not first_error
    assert engine.calls == [("refuse_if_running", "race"), ("build_and_render", "race"), ("start_servers", "race")]


def test_the_lock_is_the_kernels_between_processes_and_goes_with_its_holder(monkeypatch):
    engine = EngineCalls(monkeypatch)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, "shared"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ProjectBusy, match=f"pid {holder.pid} "):
            up_command(stack_args("shared"), detach=True)
        assert engine.calls == []
    finally:
        holder.kill()  # dies holding it: the kernel drops the lock
        holder.wait(60)
    up_command(stack_args("shared"), detach=True)
    assert [name for name, _ in engine.calls] == ["refuse_if_running", "build_and_render", "start_servers"]


def test_up_d_lets_go_of_the_project_once_the_stack_is_up(monkeypatch):
    """`-d` exits while the stack lives: the lock guarded the creation; from then on a second
    `up` is refused by the running-stack check (as before), not by a lock nobody holds."""
    engine = EngineCalls(monkeypatch)
    up_command(stack_args("detached"), detach=True)
    with owning_project("detached"):  # free again
        pass
    assert owner_lock_path("detached").parent == state.state_dir() / "projects"
    assert ("start_servers", "detached") in engine.calls


def test_a_project_being_removed_by_down_keeps_its_owner(monkeypatch):
    """`down` (or a failed start) removes the project's folder while its owner still runs; the
    lock lives beside that folder, so a new command cannot take the project meanwhile."""
    with owning_project("p"):
        state.remember_target("p", "compose")
        state.forget_project("p")
        assert not state.project_dir("p").exists()
        with pytest.raises(ProjectBusy):
            with owning_project("p"):
                pass


def test_a_refused_eval_run_makes_no_run_folder_and_removes_nothing(tmp_path, monkeypatch):
    from gym_compose.runs import eval_run
    from gym_compose.runs.eval_run import CollectionArgs, run_collection

    removed: list[str] = []  # every engine call stood in for: none may happen
    monkeypatch.setattr(eval_run, "down_quietly", lambda project: removed.append(project.name))
    monkeypatch.setattr(eval_run, "refuse_if_running", lambda name, target="compose": removed.append("asked docker"))

    def no_build(*args, **kwargs):
        removed.append("built")
        raise UserError("built")

    monkeypatch.setattr(eval_run, "build_and_render", no_build)
    results = tmp_path / "results"
    collection = CollectionArgs(results_dir=results,
                                input_file=REPO / "server_images/example_single_tool_call/data/example.jsonl")
    with owning_project("busy"):
        with pytest.raises(UserError, match="project 'busy' is being started or run by pid"):
            run_collection(stack_args("busy"), collection, serve=True, keep=False)
    assert removed == [] and not results.exists()
