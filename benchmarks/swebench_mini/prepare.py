"""Makes data/swebench_mini.jsonl from the task folders in tasks/ (no network; git on the host).

    python benchmarks/swebench_mini/prepare.py        (or: gym-compose eval prepare --benchmark swebench_mini)

The rows are checked in; run this after changing a task. Each row is in SWE-bench Pro's format
(gym_compose/runs/swe_task_rows.py); the same task files always give the same rows (base commits too).
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the checkout's gym_compose, however this is started

from gym_compose.errors import UserError  # noqa: E402
from gym_compose.runs.swe_task_rows import write_rows  # noqa: E402

OUTPUT = HERE / "data" / "swebench_mini.jsonl"


def main() -> int:
    try:
        count = write_rows(HERE / "tasks", HERE / "scripts", OUTPUT, subset="swebench_mini")
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {count} swebench_mini rows to {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
