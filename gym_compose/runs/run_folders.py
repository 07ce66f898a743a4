"""Run folders: `<results>/<name>-<YYYYmmdd-HHMMSS>[-N]`, claimed once; found again for `--resume`."""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

from gym_compose.collect.lock import current_holder
from gym_compose.contract import SERVER_UID
from gym_compose.errors import UserError

STAMP_CHARS = 15  # YYYYmmdd-HHMMSS


def claim_run_dir(results_dir: Path, name: str, resume: bool) -> tuple[Path, bool]:
    """The run folder and whether this command made it; a resumed folder that a live collector
    still writes is refused (a dead one's lock is no obstacle)."""
    if not resume:
        return new_run_dir(results_dir, name), True
    run_dir = resumed_run_dir(results_dir, name)
    holder = current_holder(run_dir)
    if holder is not None:
        raise UserError(
            f"{run_dir} is being written by another collector: {holder}",
            hint="wait for it to finish or stop it, then run with --resume again",
        )
    return run_dir, False


def new_run_dir(results_dir: Path, name: str) -> Path:
    """A fresh `<name>-<time>[-N]` folder, claimed with an exclusive mkdir (two runs never share one)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
        for suffix in range(1, 1000):
            candidate = results_dir / (f"{name}-{stamp}" if suffix == 1 else f"{name}-{stamp}-{suffix}")
            try:
                candidate.mkdir()
                return candidate
            except FileExistsError:
                continue
    except OSError as error:
        raise UserError(f"cannot create a run folder under {results_dir}: {error.strerror}",
                        hint="pick a folder you can write with --results-dir") from None
    raise UserError(f"too many runs named {name!r} in the same second under {results_dir}")


def resumed_run_dir(results_dir: Path, name: str) -> Path:
    """The latest run folder of that name."""
    own_runs = re.compile(re.escape(name) + r"-\d{8}-\d{6}(-\d+)?")
    earlier = [p for p in results_dir.glob(f"{name}-*") if own_runs.fullmatch(p.name) and p.is_dir()]
    if not earlier:
        raise UserError(f"--resume: no earlier run named {name!r} under {results_dir}",
                        hint="run without --resume first, or pass the same --run-name as that run")
    return max(earlier, key=lambda p: (p.name[len(name) + 1:len(name) + 1 + STAMP_CHARS], _suffix_number(p, name)))


def _suffix_number(path: Path, name: str) -> int:
    rest = path.name[len(name) + 1 + STAMP_CHARS:]
    return int(rest[1:]) if rest.startswith("-") and rest[1:].isdigit() else 1


def collector_user(run_dir: Path) -> str:
    """The collector writes as the host user, so the artifacts are theirs; for root, as the
    image's unprivileged user, given the run folder (a container never runs as root)."""
    uid, gid = os.getuid(), os.getgid()
    if uid != 0:
        return f"{uid}:{gid}"
    for path in [run_dir, *run_dir.iterdir()]:
        os.chown(path, SERVER_UID, SERVER_UID)
    return f"{SERVER_UID}:{SERVER_UID}"
