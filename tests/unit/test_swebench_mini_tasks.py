"""The swebench_mini tasks are what their rows say, checked on the host with no image: at the base
commit plus the hidden tests every fail-to-pass test fails and every pass-to-pass test passes; with
the reference patch all pass; the checked-in rows are exactly what prepare.py makes."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gym_compose.engine.images.task_repo import _git, commit_repository, task_folders
from gym_compose.paths import PROJECT_ROOT
from gym_compose.runs.swe_task_rows import build_row
from gym_compose.server.swe.evaluation import grade
from gym_compose.server.swe.swe_row import SWERow, listed_tests

MINI = PROJECT_ROOT / "benchmarks" / "swebench_mini"
ROWS = [json.loads(line) for line in (MINI / "data" / "swebench_mini.jsonl").read_text().splitlines()]


def test_eight_varied_tasks_in_rows():
    assert len(ROWS) >= 8
    assert len({row["instance_id"] for row in ROWS}) == len(ROWS)
    assert [row["dockerhub_tag"] for row in ROWS] == [task.name for task in task_folders(MINI / "tasks")]
    multi_file = [row for row in ROWS if row["patch"].count("diff --git") > 1]
    assert multi_file, "at least one task needs a fix in more than one file"
    for row in ROWS:
        SWERow.model_validate(row)
        assert listed_tests(row["fail_to_pass"]) and listed_tests(row["pass_to_pass"])


def test_checked_in_rows_are_what_prepare_makes():
    for row, task in zip(ROWS, task_folders(MINI / "tasks"), strict=True):
        assert build_row(task, MINI / "scripts", "swebench_mini") == row, f"rerun prepare.py for {task.name}"


def _run_tests(repository: Path, row: dict, tmp_path: Path) -> dict:
    hidden = re.search(r"printf '%s' '([A-Za-z0-9+/=]+)'", row["before_repo_set_cmd"]).group(1)
    (tmp_path / "hidden.diff").write_bytes(base64.b64decode(hidden))
    _git(repository, "apply", str(tmp_path / "hidden.diff"))
    files = listed_tests(row["selected_test_files_to_run"])
    completed = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--no-header",
                                "--color=no", *files], cwd=repository, capture_output=True, text=True, timeout=120,
                               env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                                    "PYTHONDONTWRITEBYTECODE": "1"})
    (tmp_path / "stdout.log").write_text(completed.stdout)
    (tmp_path / "stderr.log").write_text(completed.stderr)
    (tmp_path / "parser.py").write_text(row["parser_script"])
    subprocess.run([sys.executable, str(tmp_path / "parser.py"), str(tmp_path / "stdout.log"),
                    str(tmp_path / "stderr.log"), str(tmp_path / "output.json")], check=True, timeout=60)
    return json.loads((tmp_path / "output.json").read_text())


@pytest.mark.parametrize("row", ROWS, ids=[row["dockerhub_tag"] for row in ROWS])
def test_fail_to_pass_and_pass_to_pass_hold(row, tmp_path):
    task = MINI / "tasks" / row["dockerhub_tag"]
    base = tmp_path / "base"
    assert commit_repository(task, base) == row["base_commit"]
    statuses = {t["name"]: t["status"] for t in _run_tests(base, row, tmp_path)["tests"]}
    assert all(statuses.get(name) != "PASSED" for name in listed_tests(row["fail_to_pass"])), statuses
    assert all(statuses.get(name) == "PASSED" for name in listed_tests(row["pass_to_pass"])), statuses
    assert grade({"tests": [{"name": n, "status": s} for n, s in statuses.items()]}, SWERow(**row))[0] is False

    fixed = tmp_path / "fixed"
    commit_repository(task, fixed)
    (tmp_path / "fix.diff").write_text(row["patch"])
    _git(fixed, "apply", str(tmp_path / "fix.diff"))
    output = _run_tests(fixed, row, tmp_path)
    resolved, failed = grade(output, SWERow(**row))
    assert resolved, failed
