"""Under CI=true a skipped test is a failed one: a missing prerequisite must not pass unnoticed."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
SKIPPING = '''
import pytest

def test_skips_at_run_time():
    pytest.skip("no chromium")

@pytest.mark.skipif(True, reason="no fixture folder")
def test_skips_by_marker():
    pass

@pytest.mark.xfail(reason="a known bug, not a missing prerequisite")
def test_expected_to_fail():
    assert False

def test_passes():
    pass
'''


def run_pytest(folder: Path, ci: str | None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def test_a_skip_fails_under_ci_and_stays_a_skip_elsewhere(tmp_path):
    shutil.copyfile(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_prerequisites.py").write_text(SKIPPING)
    ci = run_pytest(tmp_path, "true")
    assert ci.returncode == 1
    assert "no test may skip for a missing prerequisite, but it skipped: Skipped: no chromium" in ci.stdout
    assert "Skipped: no fixture folder" in ci.stdout
    assert "1 xfailed" in ci.stdout and "1 passed" in ci.stdout
    local = run_pytest(tmp_path, None)
    assert local.returncode == 0 and "2 skipped" in local.stdout
