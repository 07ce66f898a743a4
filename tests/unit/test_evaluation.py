"""Host-side collection helpers: run folders and what the manifest records."""

import pytest

from gym_compose.errors import UserError
from gym_compose.evaluation import _new_run_dir, _redacted_argv, _resumed_run_dir


def test_new_run_folders_are_claimed_once_each(tmp_path):
    first = _new_run_dir(tmp_path, "bench")
    second = _new_run_dir(tmp_path, "bench")
    assert first != second and first.is_dir() and second.is_dir()
    assert second.name.startswith(first.name)  # the same second: a -N suffix


def test_resume_picks_the_latest_run_of_that_name_only(tmp_path):
    for name in ["calc-20261130-070000", "calc-20261130-080000-2", "calc-20261130-080000-10",
                 "calc-hard-20261130-090000", "calc-20261130-080000"]:
        (tmp_path / name).mkdir()
    assert _resumed_run_dir(tmp_path, "calc").name == "calc-20261130-080000-10"
    with pytest.raises(UserError, match="no earlier run named 'other'"):
        _resumed_run_dir(tmp_path, "other")


def test_unwritable_results_folder_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UserError, match="cannot create a run folder"):
        _new_run_dir(blocker / "results", "bench")


def test_manifest_command_line_masks_keys():
    argv = ["gym-compose", "up", "--model-api-key", "sk-1", "--model-api-key=sk-2", "++policy_api_key=sk-3",
            "+x.hf_token=t", "++policy_model_name=m", "--limit", "3"]
    shown = _redacted_argv(argv)
    assert not {"sk-1", "sk-2", "sk-3", "t"} & set(part.split("=")[-1] for part in shown)
    assert "++policy_model_name=m" in shown and shown[-2:] == ["--limit", "3"]
