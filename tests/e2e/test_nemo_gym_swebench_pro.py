"""NeMo Gym 0.7's own swebench_pro resources server (its code from the released wheel, on the NeMo
Gym runtime: `docker.runtime: nemo_gym`) verifies swebench_mini's task images, built here, through
gym-compose's sandboxes, offline. Its config is NeMo Gym's (`sandbox_provider: sandbox` with no
provider block: gym-compose's broker serves it, with a notice); only config keys change
(tests/support/nemo_gym_swe_rows.py): the image repository, the task image folder, the limits.
Rows are NeMo Gym's example row format filled with swebench_mini instances.

- With gym-compose's coding agent and the mock model: the oracle's fix (applied in the agent's
  sandbox, taken by NeMo Gym's own `git diff` extraction) scores 1.0, the adversary's 0.0;
- golden-patch verification (`is_verifying_golden_patch: true`): the row's gold patch scores 1.0,
  an empty patch 0.0, another task's patch (it does not apply) 0.0 with patch_applied false.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.e2e import BUILDS_NEMO_GYM_RUNTIME, free_port, gym_compose, labelled
from tests.support.nemo_gym_swe_rows import KEY, SERVER, local_image_overrides, nemo_gym_row

pytestmark = [pytest.mark.docker, BUILDS_NEMO_GYM_RUNTIME]

TASKS = ("intervals_merge", "leap_year_century")
AGENT = ["--agent-type", "coding_agent", f"++coding_agent.responses_api_agents.coding_agent.resources_server.name={SERVER}",
         "++agent_name=coding_agent"]


def run(nemo_gym: Path, project: str, tmp_path: Path, rows: list[dict], *extra: str) -> tuple[list[dict], str]:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    up = gym_compose("up", "-p", project, "--head-port", str(free_port()), "--search-dir", str(nemo_gym),
                     "--resources-server", "swebench_pro", *AGENT, *local_image_overrides(*extra),
                     "--input", str(path), cwd=tmp_path, timeout=2000)
    output = up.stdout + up.stderr
    assert up.returncode == 0, output[-5000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == len(rows), output[-3000:]
    assert labelled("container", project) == [] and labelled("network", project) == []
    # NeMo Gym's server, its config naming no provider block, on gym-compose's sandboxes
    assert f"server image gym-compose/swebench_pro-nemo-gym:" in output and "(NeMo Gym runtime)" in output
    assert "sandbox provider 'sandbox'" in output and "runs as gym-compose sandboxes" in output
    return rollouts, output


def mode(row: dict, name: str) -> dict:
    return {**row, "responses_create_params": {**row["responses_create_params"], "metadata": {"gym_mock_mode": name}}}


def test_nemo_gyms_swebench_pro_scores_the_agents_fix_in_its_sandbox(nemo_gym_checkout, project, tmp_path):  # noqa: F811
    rows = [mode(nemo_gym_row(nemo_gym_checkout, task), kind) for kind in ("oracle", "adversary") for task in TASKS]
    rollouts, output = run(nemo_gym_checkout, project, tmp_path, rows)
    scored = {(r["instance_id"], r["responses_create_params"]["metadata"]["gym_mock_mode"]): r for r in rollouts}
    for task in TASKS:
        oracle, adversary = scored[(f"swebench_mini__{task}", "oracle")], scored[(f"swebench_mini__{task}", "adversary")]
        assert (oracle["reward"], oracle["resolved"], oracle["patch_applied"]) == (1.0, True, True), oracle["error"]
        assert oracle["model_patch"].startswith("diff --git") and oracle["evaluation_completed"]
        assert (adversary["reward"], adversary["resolved"], adversary["patch_applied"]) == (0.0, False, True)
        # NeMo Gym's response fields, from its own verify
        assert oracle["image_provenance"] == {"image": f"swebench-mini:{task}", "source_uri": f"swebench-mini:{task}"}
        assert {t["name"] for t in oracle["test_results"]["tests"] if t["status"] == "PASSED"} >= \
            set(json.loads(oracle["fail_to_pass"]) if isinstance(oracle["fail_to_pass"], str) else oracle["fail_to_pass"])


def test_nemo_gyms_golden_patch_verification_on_local_task_images(nemo_gym_checkout, project, tmp_path):  # noqa: F811
    first, second = TASKS
    rows = [mode(nemo_gym_row(nemo_gym_checkout, first), "plain"),
            mode(nemo_gym_row(nemo_gym_checkout, first, patch=""), "plain"),
            mode(nemo_gym_row(nemo_gym_checkout, first, patch=nemo_gym_row(nemo_gym_checkout, second)["patch"]),
                 "plain")]
    rollouts, _ = run(nemo_gym_checkout, project, tmp_path, rows, f"{KEY}.is_verifying_golden_patch=true")
    by_patch = {row["patch"]: row for row in rollouts}
    gold, empty, other = (by_patch[row["patch"]] for row in rows)
    assert (gold["reward"], gold["resolved"], gold["patch_applied"]) == (1.0, True, True), gold["error"]
    assert (empty["reward"], empty["resolved"], empty["patch_applied"]) == (0.0, False, True)
    assert (other["reward"], other["resolved"], other["patch_applied"]) == (0.0, False, False)
