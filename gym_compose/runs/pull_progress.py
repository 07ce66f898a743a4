"""The sandbox broker's image pulls, shown on the host while a run collects.

A SWE-bench Pro instance's first rollout waits while the broker pulls its image (several GB); its
log says so (`pulling IMAGE`, `pulling IMAGE: 1.20 of 4.50 GB`, `pulled IMAGE in 95.0 s`). This
follows the broker's log into the run folder (`sandbox-broker.log`) and hands the pull lines to
the progress display, so a run that seems to stand still says why.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import IO, Optional

from gym_compose.engine.targets.deployed_stack import DeployedStack, RunningProcess
from gym_compose.plan.sandbox_names import BROKER_SERVICE

LOG_FILE = "sandbox-broker.log"
PULL_LINE = re.compile(r"gym_compose\.sandbox\.broker: (pull(?:ing|ed) \S.*)$")


def pull_lines(text: str) -> list[str]:
    """The pull messages among broker log lines."""
    return [match.group(1).strip() for line in text.splitlines() if (match := PULL_LINE.search(line))]


class PullProgress:
    def __init__(self, process: Optional[RunningProcess], log: IO[str], path: Path):
        self.process, self.log, self.path = process, log, path
        self.offset = path.stat().st_size if path.exists() else 0

    @classmethod
    def follow(cls, stack: DeployedStack, run_dir: Path) -> Optional["PullProgress"]:
        """None where the target does not follow one service's log."""
        path = run_dir / LOG_FILE
        log = open(path, "a", encoding="utf-8", errors="replace")
        progress = cls(None, log, path)
        progress.process = stack.follow_service_log(BROKER_SERVICE, log)
        if progress.process is None:
            progress.stop()
            return None
        return progress

    def new_lines(self) -> list[str]:
        """Pull messages written since the last call (whole lines only)."""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as log:
                log.seek(self.offset)
                text = log.read()
        except OSError:
            return []
        complete = text[:text.rfind("\n") + 1]
        self.offset += len(complete.encode("utf-8"))
        return pull_lines(complete)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace_seconds=2)
        self.log.close()
        if self.path.exists() and self.path.stat().st_size == 0:
            self.path.unlink()  # the broker said nothing during the run
