"""The suite's lane (tests/conftest.py): under pytest-xdist every Docker test runs in one worker,
so two of them never run at once. Checked on a small suite of its own, because a
pytest or pytest-xdist upgrade can silently drop the groups (pytest 9.2 did)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
TESTS = '''
import pytest

pytestmark = pytest.mark.docker

@pytest.mark.parametrize("n", range(4))
def test_one(n):
    pass
'''
REPORTED = re.compile(r"\[(gw\d+)\] (?:\[ *\d+%\] )?(?:PASSED|SKIPPED) (\S+?)::test_one\[\d\]@(\S+)")


def test_every_docker_test_runs_in_one_worker(tmp_path):
    shutil.copyfile(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    docker: needs Docker\n")
    for module in ("test_stack.py", "test_swarm.py", "test_nemo_gym_runtime.py", "test_mcp.py"):
        (tmp_path / module).write_text(TESTS)
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-n", "3",
                           "--dist", "loadgroup", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    reported = REPORTED.findall(done.stdout)
    assert len(reported) == 16, done.stdout[-3000:]
    workers: dict[str, set[str]] = {}
    for worker, _module, lane in reported:
        workers.setdefault(lane, set()).add(worker)
    assert set(workers) == {"docker-engine"}
    assert len(workers["docker-engine"]) == 1, workers
