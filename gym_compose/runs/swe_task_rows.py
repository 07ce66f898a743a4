"""SWE-bench Pro rows from SWE task folders (the offline benchmarks, e.g. benchmarks/swebench_mini).

A task folder (docs/swe.md):

    <name>/repo/          the repository at its base commit (becomes /app of the task's image)
    <name>/fix/           the files the reference fix changes, as they are after it
    <name>/hidden_tests/  the test files verification adds or replaces (never in the image)
    <name>/task.yaml      problem_statement, requirements, interface, fail_to_pass, pass_to_pass,
                          issue_specificity, issue_categories

gives one row in exactly SWE-bench Pro's format: `patch` and `test_patch` are git diffs against
the base commit, `before_repo_set_cmd` ends with the line that brings the hidden tests in (the
hidden test patch travels inside that line, base64), the benchmark's `run_script` and
`parser_script` are pinned into the row, and `dockerhub_tag` is the folder name (the image a
lease asks for is `<repository>:<name>`). Made with git on the host, the same on every machine.
"""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from gym_compose.engine.images.task_repo import _git, commit_repository
from gym_compose.errors import UserError

FIX_FOLDER = "fix"
HIDDEN_FOLDER = "hidden_tests"
TASK_FILE = "task.yaml"
REQUIRED_KEYS = ("problem_statement", "fail_to_pass", "pass_to_pass")
BASE_DOCKERFILE = """\
# swebench_mini task image (built offline by gym-compose, docker/swe-task.Dockerfile):
# Debian bookworm with python3, python-is-python3, python3-pytest, git, patch (mmdebstrap)
FROM gym-compose/debian-swe
ENV PYTHONDONTWRITEBYTECODE=1
ENV PYTHONUNBUFFERED=1
"""
INSTANCE_DOCKERFILE = """\
FROM base_swebench_mini
# the task's repository at /app, one commit (its base_commit)
COPY app /app
WORKDIR /app
"""


def read_task(task_dir: Path) -> dict[str, Any]:
    path = task_dir / TASK_FILE
    try:
        task = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise UserError(f"SWE task {task_dir.name}: cannot read {path}: {error}") from None
    if not isinstance(task, dict):
        raise UserError(f"SWE task {task_dir.name}: {path} must be a mapping")
    missing = [key for key in REQUIRED_KEYS if not task.get(key)]
    if missing:
        raise UserError(f"SWE task {task_dir.name}: {path} lacks {', '.join(missing)}")
    for folder in (FIX_FOLDER, HIDDEN_FOLDER):
        if not (task_dir / folder).is_dir():
            raise UserError(f"SWE task {task_dir.name}: {task_dir / folder} is missing (see docs/swe.md)")
    return task


def _files(folder: Path) -> list[Path]:
    return sorted(p.relative_to(folder) for p in folder.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def _diff_with(repository: Path, base: str, overlay: Path) -> str:
    """The diff against `base` of the repository with `overlay`'s files written over it."""
    _git(repository, "reset", "--hard", "--quiet", base)
    _git(repository, "clean", "-fdq")
    for relative in _files(overlay):
        target = repository / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(overlay / relative, target)
        target.chmod(0o644)
    _git(repository, "add", "--all")
    return _git(repository, "diff", "--cached", "--no-color", "--no-ext-diff", "--full-index", base)


def hidden_tests_command(base: str, test_patch: str, test_roots: list[str]) -> str:
    """One shell line that puts the test folders back to the base commit (whatever the candidate
    did to them) and applies the hidden tests."""
    encoded = base64.b64encode(test_patch.encode("utf-8")).decode("ascii")
    roots = " ".join(test_roots)
    return (f"git checkout -q {base} -- {roots} && git clean -fdq -- {roots} && "
            f"printf '%s' '{encoded}' | base64 -d | git apply --whitespace=nowarn -")


def build_row(task_dir: Path, scripts_dir: Path, subset: str) -> dict[str, Any]:
    task = read_task(task_dir)
    with tempfile.TemporaryDirectory(prefix="gym-compose-swe-") as scratch:
        repository = Path(scratch) / "repo"
        base = commit_repository(task_dir, repository)
        patch = _diff_with(repository, base, task_dir / FIX_FOLDER)
        test_patch = _diff_with(repository, base, task_dir / HIDDEN_FOLDER)
    if not patch.strip():
        raise UserError(f"SWE task {task_dir.name}: fix/ changes nothing")
    if not test_patch.strip():
        raise UserError(f"SWE task {task_dir.name}: hidden_tests/ changes nothing")
    hidden = [p.as_posix() for p in _files(task_dir / HIDDEN_FOLDER)]
    visible = [p.relative_to(task_dir / "repo").as_posix() for p in sorted((task_dir / "repo").rglob("test_*.py"))]
    roots = sorted({path.split("/", 1)[0] for path in hidden})
    prompt = (scripts_dir / "prompt.txt").read_text(encoding="utf-8")
    fields = {key: str(task.get(key) or "").strip() for key in ("problem_statement", "requirements", "interface")}
    name = task_dir.name
    return {
        "repo": f"gym-compose/{subset}-{name}",
        "instance_id": f"{subset}__{name}",
        "base_commit": base,
        "patch": patch,
        "test_patch": test_patch,
        **fields,
        "repo_language": "python",
        "fail_to_pass": json.dumps(list(task["fail_to_pass"])),
        "pass_to_pass": json.dumps(list(task["pass_to_pass"])),
        "issue_specificity": json.dumps(list(task.get("issue_specificity") or [])),
        "issue_categories": json.dumps(list(task.get("issue_categories") or [])),
        "before_repo_set_cmd": "\n".join([f"git reset --hard {base}", "git clean -fd", f"git checkout {base}",
                                          hidden_tests_command(base, test_patch, roots)]),
        "selected_test_files_to_run": json.dumps(sorted({*visible, *hidden})),
        "dockerhub_tag": name,
        "image_digest": "",
        "run_script": (scripts_dir / "run_script.sh").read_text(encoding="utf-8"),
        "parser_script": (scripts_dir / "parser.py").read_text(encoding="utf-8"),
        "base_dockerfile": BASE_DOCKERFILE,
        "instance_dockerfile": INSTANCE_DOCKERFILE,
        "subset": subset,
        "split": "test",
        "responses_create_params": {"input": [{"role": "user", "content": prompt.format(**fields)}]},
    }


def write_rows(tasks_dir: Path, scripts_dir: Path, output: Path, subset: str) -> int:
    """Every task folder under `tasks_dir` as one row of `output` (replaced atomically)."""
    from gym_compose.engine.images.task_repo import task_folders

    rows = [build_row(task_dir, scripts_dir, subset) for task_dir in task_folders(tasks_dir)]
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_suffix(output.suffix + ".partial")
    partial.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    partial.replace(output)
    return len(rows)
