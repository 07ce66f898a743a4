"""A run never reports success for a run folder it did not write (issue 22): a manifest whose
`collection.collector_args` moved the collector's output reran with exit 0 and "gym-compose
finished", its new run folder empty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_compose.config.request import ConfigRequest
from gym_compose.engine.targets.registry import TargetOptions
from gym_compose.errors import UserError
from gym_compose.plan.model import StackOptions
from gym_compose.runs import eval_run, rerun
from gym_compose.runs.eval_run import run_collection
from gym_compose.runs.run_inputs import PASSED_THROUGH, CollectionArgs, check_passed_through
from gym_compose.runs.supervision import CollectorOutcome
from gym_compose.stack import state
from gym_compose.stack.lifecycle import StackArgs

REPO = Path(__file__).resolve().parents[2]
ROWS = REPO / "server_images/example_single_tool_call/data/example.jsonl"


@pytest.fixture(autouse=True)
def _own_state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(state.STATE_DIR_ENV, str(tmp_path / "state"))


@pytest.mark.parametrize("args", [["--output-dir", "/tmp/elsewhere"], ["--output", "/tmp/elsewhere"],
                                  ["--input=/etc/passwd"], ["--host-lease"], ["--resume"], ["--limit"],
                                  ["--limit", "2", "--prompt-config", "/x.yaml"]])
def test_collector_options_that_move_input_or_output_are_refused_naming_where(args):
    with pytest.raises(UserError) as refused:
        check_passed_through(args, "RUN/manifest.json: collection.collector_args")
    assert str(refused.value).startswith("RUN/manifest.json: collection.collector_args: collector option")
    assert "--limit" in str(refused.value.hint) or "has no value" in str(refused.value)


def test_the_options_a_command_line_passes_through_are_accepted():
    args = [part for flag in PASSED_THROUGH for part in (flag, "3")] + ["--temperature=0.5"]
    check_passed_through(args, "the command line")


def test_a_rerun_of_a_manifest_that_redirects_the_output_is_refused_before_anything_starts(tmp_path, monkeypatch):
    from gym_compose.config import load
    from gym_compose.config.redact import redact

    run_dir = tmp_path / "calc-20261130-070000"
    run_dir.mkdir()
    (run_dir / "input.jsonl").write_text(ROWS.read_text())
    data = load(ConfigRequest(resources_servers=["example_single_tool_call"]), cwd=REPO).data
    (run_dir / "manifest.json").write_text(json.dumps({
        "resolved_config": redact(data), "images": {},
        "collection": {"collector_args": ["--limit", "2", "--output-dir", "/tmp/elsewhere"]}}))
    monkeypatch.setattr(rerun, "pin_images", lambda manifest, rebuild, ask: ({}, {}))
    monkeypatch.setattr(eval_run, "refuse_if_running", lambda *a, **k: pytest.fail("the rerun reached the engine"))
    with pytest.raises(UserError) as refused:
        rerun.rerun_command(run_dir, (StackOptions(project="p"), TargetOptions()), [], None, tmp_path / "results", None,
                            keep=False, rebuild=False, cwd=tmp_path)
    assert f"{run_dir}/manifest.json: collection.collector_args: collector option '--output-dir'" in str(refused.value)
    assert not (tmp_path / "results").exists()


def test_a_collector_that_exits_0_but_wrote_no_rollouts_is_no_success(tmp_path, monkeypatch):
    """The engine stood in for: a collector that exits 0 having written nothing into the run folder."""
    from gym_compose.engine.targets.compose_project import ComposeProject

    said: list[str] = []
    monkeypatch.setattr(eval_run, "refuse_if_running", lambda *a, **k: None)
    monkeypatch.setattr(eval_run, "build_and_render", lambda stack, target, out, collector, **_: (
        {}, ComposeProject(stack.project, None)))
    monkeypatch.setattr(eval_run, "start_servers", lambda stack, project: None)
    monkeypatch.setattr(eval_run, "EngineFacts", lambda images: None)
    monkeypatch.setattr(eval_run, "write_manifest", lambda *a, **k: None)
    monkeypatch.setattr(eval_run, "run_collector", lambda project, run_dir, services: CollectorOutcome(0))
    monkeypatch.setattr(eval_run, "stop_and_remove", lambda project: said.append("gym-compose finished"))
    args = StackArgs(ConfigRequest(resources_servers=["example_single_tool_call"]), StackOptions(project="p"))
    collection = CollectionArgs(results_dir=tmp_path / "results", input_file=ROWS)
    with pytest.raises(UserError) as failed:
        run_collection(args, collection, serve=True, keep=False)
    assert failed.value.exit_code == 1
    rows = sum(1 for line in ROWS.read_text().splitlines() if line.strip())
    assert f"rollouts.jsonl holds 0 of the run's {rows} rollouts" in str(failed.value)
    assert "collector.log" in str(failed.value.hint)
    assert said == ["gym-compose finished"]  # the stack is removed all the same

    def writes_every_rollout(project, run_dir, services):
        (run_dir / "rollouts.jsonl").write_text("{}\n" * rows)
        return CollectorOutcome(0)

    monkeypatch.setattr(eval_run, "run_collector", writes_every_rollout)
    assert run_collection(args, collection, serve=True, keep=False) == 0


def test_a_collector_still_busy_after_a_stop_is_removed_so_resume_can_run(tmp_path, monkeypatch):
    """A server died; the collector, asked to stop, is still busy (bench_soak: aggregating 90,000
    rollouts) when the grace ends: stopping the `docker run` client is not enough, the container
    itself must go, or the --resume the error suggests is refused for a collector 'still running'."""
    from gym_compose.runs import supervision

    class BusyCollector:
        stopped_with = None

        def wait(self, timeout=None):
            return None

        def stop(self, grace_seconds):
            self.stopped_with = grace_seconds
            return 137

    class Stack:
        removed: list = []

        def run_one_off(self, service, log):
            return collector

        def remove_one_off(self, service=None):
            self.removed.append(service)

    collector, stack = BusyCollector(), Stack()
    monkeypatch.setattr(supervision, "watch", lambda *a: "server agent exited (exit code 137)")
    outcome = supervision.run_collector(stack, tmp_path, services=["agent"])
    assert outcome == CollectorOutcome(137, "server agent exited (exit code 137)")
    assert collector.stopped_with is not None
    assert stack.removed == [supervision.COLLECTOR_SERVICE]
