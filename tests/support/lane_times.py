"""Where a test run's minutes go, per worker, for balancing the lanes (tests/conftest.py's LANES).

    LANE_TIMES=/tmp/lanes.jsonl .venv/bin/pytest        # tests/conftest.py appends one line per test
    .venv/bin/python -m tests.support.lane_times /tmp/lanes.jsonl

Prints each worker's modules in the order they ran, with when each started and ended (seconds
from the session's start; modules under 5 s left out).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def summary(path: Path) -> str:
    spans: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        record = json.loads(line)
        span = spans[record["worker"]].setdefault(record["module"], [record["start"], record["end"]])
        span[0], span[1] = min(span[0], record["start"]), max(span[1], record["end"])
    lines = []
    for worker in sorted(spans):
        modules = sorted(spans[worker].items(), key=lambda item: item[1][0])
        lines.append(f"{worker}: ends at {max(end for _, end in spans[worker].values()):.0f} s")
        for module, (start, end) in modules:
            if end - start >= 5:
                lines.append(f"  {start:7.0f} - {end:7.0f} s  {end - start:6.0f} s  {module}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1])))
