"""The host side of a collection run: run folders, what the manifest records, a failed start."""

from pathlib import Path

import pytest

from gym_compose.errors import UserError
from gym_compose.runs.manifest import redacted_argv
from gym_compose.runs.run_folders import new_run_dir, resumed_run_dir


def test_new_run_folders_are_claimed_once_each(tmp_path):
    first = new_run_dir(tmp_path, "bench")
    second = new_run_dir(tmp_path, "bench")
    assert first != second and first.is_dir() and second.is_dir()
    assert second.name.startswith(first.name)  # the same second: a -N suffix


def test_resume_picks_the_latest_run_of_that_name_only(tmp_path):
    for name in ["calc-20261130-070000", "calc-20261130-080000-2", "calc-20261130-080000-10",
                 "calc-hard-20261130-090000", "calc-20261130-080000"]:
        (tmp_path / name).mkdir()
    assert resumed_run_dir(tmp_path, "calc").name == "calc-20261130-080000-10"
    with pytest.raises(UserError, match="no earlier run named 'other'"):
        resumed_run_dir(tmp_path, "other")


def test_unwritable_results_folder_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UserError, match="cannot create a run folder"):
        new_run_dir(blocker / "results", "bench")


def test_manifest_command_line_masks_keys():
    argv = ["gym-compose", "up", "--model-api-key", "sk-1", "--model-api-key=sk-2", "++policy_api_key=sk-3",
            "+x.hf_token=t", "++policy_model_name=m", "--limit", "3"]
    shown = redacted_argv(argv)
    assert not {"sk-1", "sk-2", "sk-3", "t"} & set(part.split("=")[-1] for part in shown)
    assert "++policy_model_name=m" in shown and shown[-2:] == ["--limit", "3"]


def test_a_start_that_fails_removes_the_run_folder_it_made(tmp_path, monkeypatch):
    """No empty run folder is left by a stack that never became healthy (no Docker: the engine
    calls around the start are stood in for)."""
    from gym_compose.config.request import ConfigRequest
    from gym_compose.engine.targets.compose_project import ComposeProject
    from gym_compose.plan.model import StackOptions
    from gym_compose.runs import eval_run
    from gym_compose.runs.eval_run import CollectionArgs, run_collection
    from gym_compose.stack.lifecycle import StackArgs

    repo = Path(__file__).resolve().parents[2]
    compose_file = tmp_path / "compose.yaml"
    compose_file.write_text("services: {}\n")
    monkeypatch.setattr(eval_run, "refuse_if_running", lambda name, target="compose": None)
    monkeypatch.setattr(eval_run, "refuse_second_collector", lambda project: None)
    monkeypatch.setattr(eval_run, "build_and_render", lambda stack, target, out, collector, **_: ({}, ComposeProject("p", compose_file)))
    monkeypatch.setattr(eval_run, "down_quietly", lambda project: None)

    def failing_start(stack, project):
        raise UserError("policy-model stopped during start-up")

    monkeypatch.setattr(eval_run, "start_servers", failing_start)
    results = tmp_path / "results"
    args = StackArgs(ConfigRequest(resources_servers=["example_single_tool_call"]), StackOptions(project="p"))
    collection = CollectionArgs(results_dir=results, input_file=repo / "server_images/example_single_tool_call/data/example.jsonl")
    with pytest.raises(UserError, match="stopped during start-up"):
        run_collection(args, collection, serve=True, keep=False)
    assert results.is_dir() and list(results.iterdir()) == []
