"""The CI recipe's script end to end (docs/ci.md): a baseline run, a run that holds the threshold
against it, and a worse run (the mock model playing the adversary) that fails the job; each one
with its run folder and the exported HTML report. The workflow file runs the same script
(tests/unit/test_ci_workflow.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.e2e import REPO, free_port, labelled, read_jsonl

pytestmark = pytest.mark.docker
SCRIPT = REPO / "scripts" / "ci_benchmark"


def ci_benchmark(project: str, out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PROJECT": project, "HEAD_PORT": str(free_port()), "LIMIT": "5",
           "GYM_COMPOSE": str(REPO / ".venv" / "bin" / "gym-compose")}
    return subprocess.run([str(SCRIPT), str(out), *args], cwd=out.parent, env=env, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.timeout(2400)
def test_the_ci_script_fails_the_job_when_a_run_falls_below_its_baseline(project, tmp_path):
    base = ci_benchmark(project, tmp_path / "base")
    assert base.returncode == 0, (base.stdout + base.stderr)[-4000:]
    baseline = tmp_path / "base"
    (run,) = baseline.glob("candidate-*")
    assert len(read_jsonl(run / "rollouts.jsonl")) == 5
    assert "<html" in (tmp_path / "base" / "report.html").read_text()[:2000].lower()

    held = ci_benchmark(project, tmp_path / "held", str(run))  # the run folder itself
    assert held.returncode == 0, (held.stdout + held.stderr)[-4000:]
    assert "thresholds held: mean/reward (tolerance 0.05)" in held.stderr

    worse = ci_benchmark(project, tmp_path / "worse", str(baseline), "--",  # the OUT_DIR holding it
                         "++policy_model.responses_api_models.mock_model.mode=adversary")
    assert worse.returncode == 1, (worse.stdout + worse.stderr)[-4000:]
    assert "run B fell below run A" in worse.stderr and "mean/reward fell from 1 (A) to 0 (B)" in worse.stderr
    assert (tmp_path / "worse" / "report.html").is_file()  # the report is there for the failed job too
    assert labelled("container", project) == []
