"""A task repository's files made into a git repository with one commit, the same commit on every
machine: fixed author, committer, dates and message, every file 0644, no hooks. So the commit id
in a row (`base_commit`) names exactly the files in `tasks/<name>/repo/`, and an image built from
them has the repository at `/app` at that commit with nothing else in its history (hidden tests
come only with verification, never through the image)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from gym_compose.errors import UserError

REPO_FOLDER = "repo"
AUTHOR = ("gym-compose", "swe-tasks@gym-compose.invalid")
COMMIT_DATE = "2025-01-01T00:00:00+00:00"
GIT_TIMEOUT_S = 60
_SKIPPED = {"__pycache__", ".pytest_cache", ".git"}


def repository_files(task_dir: Path) -> list[Path]:
    """The files of `task_dir/repo`, relative to it, sorted (caches left out)."""
    root = task_dir / REPO_FOLDER
    if not root.is_dir():
        raise UserError(f"SWE task {task_dir.name}: {root} is missing",
                        hint="a task folder holds repo/ (the repository at its base commit); see docs/swe.md")
    files = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part in _SKIPPED or part.endswith(".pyc") for part in relative.parts):
            continue
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise UserError(f"SWE task {task_dir.name}: {relative} is not a plain file or folder")
        if path.is_file():
            files.append(relative)
    if not files:
        raise UserError(f"SWE task {task_dir.name}: {root} holds no files")
    return files


def commit_repository(task_dir: Path, target: Path) -> str:
    """Copy the task's repository files to `target` (a new folder), make it a git repository with
    one deterministic commit, and return that commit's id."""
    files = repository_files(task_dir)
    target.mkdir(parents=True)
    for relative in files:
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(task_dir / REPO_FOLDER / relative, destination)
        destination.chmod(0o644)
    _git(target, "init", "--quiet", "--template=")
    _git(target, "add", "--all")
    _git(target, "commit", "--quiet", "--no-verify", "--no-gpg-sign", "-m", f"{task_dir.name}: base")
    return _git(target, "rev-parse", "HEAD").strip()


def base_commit(task_dir: Path, scratch: Path) -> str:
    """The commit id the task's repository gets (made in `scratch`, removed after)."""
    target = scratch / f"{task_dir.name}-repo"
    try:
        return commit_repository(task_dir, target)
    finally:
        shutil.rmtree(target, ignore_errors=True)


def _git(cwd: Path, *args: str) -> str:
    if shutil.which("git") is None:
        raise UserError("git is not installed; SWE task repositories are made with it",
                        hint="install git (e.g. `sudo apt-get install git`)")
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update({
        "GIT_AUTHOR_NAME": AUTHOR[0], "GIT_AUTHOR_EMAIL": AUTHOR[1], "GIT_AUTHOR_DATE": COMMIT_DATE,
        "GIT_COMMITTER_NAME": AUTHOR[0], "GIT_COMMITTER_EMAIL": AUTHOR[1], "GIT_COMMITTER_DATE": COMMIT_DATE,
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": str(cwd),
    })
    completed = subprocess.run(["git", "-c", "core.autocrlf=false", "-c", "core.fileMode=true", *args], cwd=cwd,
                               env=env, capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    if completed.returncode != 0:
        raise UserError(f"git {args[0]} failed in {cwd}: {completed.stderr.strip()}")
    return completed.stdout


def task_folders(folder: Path) -> list[Path]:
    """The task folders under `folder`: every subfolder that holds a `repo/`."""
    found = sorted(path for path in folder.iterdir() if (path / REPO_FOLDER).is_dir())
    if not found:
        raise UserError(f"{folder} holds no SWE task folders (subfolders with a repo/ folder)",
                        hint="see docs/swe.md for the layout of a task folder")
    return found
