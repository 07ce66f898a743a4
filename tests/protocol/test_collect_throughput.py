"""The collector's own overhead: 500 rows at 32 in parallel against a trivial fake server on loopback.

Prints rollouts/s and collector CPU per rollout (run with -s to see them). The floor is far below
what a 2-core machine does (~700 rollouts/s), so that only a real regression fails it.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time

import pytest
from test_collect_entry import REPO, collector_cmd, config_yaml, servers, write_rows  # noqa: F401 (servers: fixture)

pytestmark = pytest.mark.protocol
FLOOR_ROLLOUTS_PER_S = 100


def test_500_rows_at_32_in_parallel(servers, tmp_path):  # noqa: F811
    port = servers("ok")
    rows = write_rows(tmp_path / "rows.jsonl", 500)
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": config_yaml({"agent": port})}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(collector_cmd(rows, tmp_path / "out", "--num-samples-in-parallel", "32"),
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    cpu_ms = ((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)) * 1000
    progress = json.loads((tmp_path / "out" / "progress.json").read_text())
    print(f"\ncollector: {progress['rollouts_per_second']:.0f} rollouts/s while collecting, "
          f"{500 / wall:.0f} rollouts/s including interpreter start, {cpu_ms / 500:.2f} ms CPU per rollout (process total)")
    assert progress["done"] == 500
    assert progress["rollouts_per_second"] >= FLOOR_ROLLOUTS_PER_S
