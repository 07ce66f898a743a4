"""docs/ci/github-actions.yml runs scripts/ci_benchmark (which tests/e2e/test_ci_recipe.py runs end
to end) and keeps the run folder and report whatever the outcome."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "ci_benchmark"
WORKFLOW = REPO / "docs" / "ci" / "github-actions.yml"


def test_the_workflow_runs_the_same_script_and_uploads_the_run_and_report():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    runs = "\n".join(step.get("run", "") for step in steps)
    assert "scripts/setup" in runs and "scripts/ci_benchmark ci-out" in runs
    uploads = [step for step in steps if str(step.get("uses", "")).startswith("actions/upload-artifact")]
    assert uploads and "ci-out" in uploads[0]["with"]["path"] and uploads[0].get("if") == "always()"
    assert os.access(SCRIPT, os.X_OK)
