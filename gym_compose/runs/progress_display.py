"""The collector's progress on the host: a live line on a terminal, a line every few seconds otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any, Protocol

BAR_WIDTH = 30
PLAIN_EVERY_SECONDS = 5.0


class NoticeSource(Protocol):
    """Lines to show above the progress line (the sandbox broker's image pulls)."""

    def new_lines(self) -> list[str]: ...


class ProgressDisplay:
    def __init__(self, notices: NoticeSource | None = None) -> None:
        self.tty = sys.stderr.isatty()
        self.last_line = ""
        self.last_print = 0.0
        self.notices = notices

    def update(self, progress: dict[str, Any] | None) -> None:
        for line in self.notices.new_lines() if self.notices is not None else []:
            self.close()
            sys.stderr.write(f"sandbox broker: {line}\n")
            self.last_line = ""
        if not progress:
            return
        total, done, failed = progress.get("total", 0), progress.get("done", 0), progress.get("failed", 0)
        rate, reward = progress.get("rollouts_per_second") or 0.0, progress.get("mean_reward")
        filled = int(BAR_WIDTH * done / total) if total else 0
        line = (f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total}  {rate:.1f} rollouts/s  "
                f"mean reward {reward if reward is None else f'{reward:.3f}'}  failures {failed}")
        if line == self.last_line:
            return
        if self.tty:
            sys.stderr.write("\r" + line)
            sys.stderr.flush()
        elif time.monotonic() - self.last_print > PLAIN_EVERY_SECONDS or progress.get("finished"):
            sys.stderr.write(line + "\n")
            self.last_print = time.monotonic()
        else:
            return  # not shown: the last line shown stays the one to compare with (the final one is shown)
        self.last_line = line

    def close(self) -> None:
        """End the progress line, so that a message can follow on its own line."""
        if self.tty and self.last_line:
            sys.stderr.write("\n")
            self.last_line = ""
