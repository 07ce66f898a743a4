"""How the benchmarks run the gym-compose CLI: the environment it starts in, and when an eval run's
first rollout was written (a run folder's rollouts.jsonl holding data)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def cached_bytecode_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without PYTHONDONTWRITEBYTECODE, so the CLI reads its cached bytecode as an
    installed tool does (with it set, as in some shells, every start compiles ~100 modules again)."""
    return {key: value for key, value in (os.environ if environ is None else environ).items()
            if key != "PYTHONDONTWRITEBYTECODE"}


class FirstRolloutWatch:
    """Call `poll()` while an eval run runs: `seconds` becomes the time from the watch's creation
    (or `started`, a time.monotonic()) until a rollout was first seen written in a run folder under
    `results` matching `run_folder` (a glob: `NAME-*` for `--run-name NAME`)."""

    def __init__(self, results: Path, run_folder: str = "*", started: float | None = None):
        self.results, self.pattern = results, f"{run_folder}/rollouts.jsonl"
        self.started = time.monotonic() if started is None else started
        self.seconds: float | None = None

    def poll(self) -> None:
        if self.seconds is None:
            written = next(self.results.glob(self.pattern), None)
            if written is not None and written.stat().st_size > 0:
                self.seconds = time.monotonic() - self.started


def repeated_rows(source: Path, target: Path, count: int) -> Path:
    """Write `count` rows to `target`: the non-blank lines of the JSONL file `source`, repeated in order."""
    lines = [line for line in source.read_text().splitlines() if line.strip()]
    target.write_text("".join(lines[i % len(lines)] + "\n" for i in range(count)))
    return target
