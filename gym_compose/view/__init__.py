"""`gym-compose view`: look at run folders in a web page, live or exported as one HTML file.

Public API: `serve(folders, host, port, open_browser)` (blocks until Ctrl-C) and
`export_report(folders, output, max_tasks, max_rollouts)`. Host side only; reads run folders,
never writes into them. Reference: docs/view.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gym_compose.view.export import DEFAULT_MAX_ROLLOUTS, DEFAULT_MAX_TASKS, write_export


def serve(folders: list[Path], host: str = "127.0.0.1", port: int = 0, open_browser: bool = False) -> None:
    from gym_compose.view.server import serve as run_server

    run_server(folders, host=host, port=port, open_browser=open_browser)


def export_report(folders: list[Path], output: Path, max_tasks: int = DEFAULT_MAX_TASKS,
                  max_rollouts: int = DEFAULT_MAX_ROLLOUTS) -> None:
    size = write_export(folders, output, max_tasks=max_tasks, max_rollouts=max_rollouts)
    print(f"wrote {output} ({size / 1e6:.1f} MB; opens with no server and no network)", file=sys.stderr)


__all__ = ["serve", "export_report"]
