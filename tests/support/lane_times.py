"""Where a test run's minutes go, per worker: each module's start and end, for balancing the lanes
(tests/conftest.py's LANES).

    PYTHONPATH=. PYTEST_ADDOPTS="-p tests.support.lane_times" LANE_TIMES=/tmp/lanes.jsonl .venv/bin/pytest
    .venv/bin/python -m tests.support.lane_times /tmp/lanes.jsonl

The plugin appends one line per test (worker, module, seconds from the session's start at its
set-up and after its teardown) to $LANE_TIMES; the summary prints each worker's modules in the
order they ran, with when each started and ended and how long the worker then sat idle.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

_SESSION_START = float(os.environ.setdefault("LANE_TIMES_EPOCH", str(time.time())))  # workers inherit it


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get("LANE_TIMES")
    started = time.time() - _SESSION_START
    yield
    if path:
        record = {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "module": Path(str(item.fspath)).stem,
                  "start": round(started, 2), "end": round(time.time() - _SESSION_START, 2)}
        with open(path, "a") as sink:
            sink.write(json.dumps(record) + "\n")


def summary(path: Path) -> str:
    spans: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        record = json.loads(line)
        span = spans[record["worker"]].setdefault(record["module"], [record["start"], record["end"]])
        span[0], span[1] = min(span[0], record["start"]), max(span[1], record["end"])
    lines = []
    for worker in sorted(spans):
        modules = sorted(spans[worker].items(), key=lambda item: item[1][0])
        lines.append(f"{worker}: ends at {modules[-1][1][1]:.0f} s")
        for module, (start, end) in modules:
            if end - start >= 5:
                lines.append(f"  {start:7.0f} - {end:7.0f} s  {end - start:6.0f} s  {module}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1])))
