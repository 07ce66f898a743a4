"""500 rows at 32 in parallel: every rollout is written exactly once (rates are for bench/, not tests)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.support import REPO
from tests.support.collector import collector_cmd, config_yaml, write_rows

pytestmark = pytest.mark.protocol


def test_500_rows_at_32_in_parallel_are_each_written_once(servers, tmp_path):  # noqa: F811
    port = servers("ok")
    rows = write_rows(tmp_path / "rows.jsonl", 500)
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": config_yaml({"agent": port})}
    done = subprocess.run(collector_cmd(rows, tmp_path / "out", "--num-samples-in-parallel", "32"),
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    written = [json.loads(line) for line in (tmp_path / "out" / "rollouts.jsonl").read_text().splitlines()]
    assert sorted(row["_ng_task_index"] for row in written) == list(range(500))
    assert json.loads((tmp_path / "out" / "progress.json").read_text())["done"] == 500
