"""NeMo Gym 0.7's own SWE resources servers (their code from the released wheel, on the NeMo Gym
runtime) verify swebench_mini's task images, built here, through gym-compose's sandboxes, offline.
Their configs are NeMo Gym's (`sandbox_provider: sandbox` with no provider block: gym-compose's
broker serves it, with a notice); only config keys change (tests/support/nemo_gym_swe.py): the
image repository, the task image folder, the limits. Rows are each server's example row format
filled with swebench_mini instances.

swebench_pro (`docker.runtime: nemo_gym`: gym-compose has a built-in of that name):
- with gym-compose's coding agent and the mock model, the oracle's fix (made in the agent's
  sandbox, taken by NeMo Gym's own `git diff` extraction) scores 1.0, the adversary's 0.0;
- golden-patch verification (`is_verifying_golden_patch: true`): the row's gold patch scores 1.0,
  an empty patch 0.0, another task's patch (it does not apply) 0.0 with patch_applied false.
scale_swe, swemer_v2, swemer_v1, swe_next and swemer_oml, each through its own golden-patch set-up
(<server>_example.yaml): the gold patch 1.0, an empty one 0.0 (swe_next's and swemer_oml's row
formats: tests/support/nemo_gym_swe_rows.py).
"""

from __future__ import annotations

import json

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.e2e import BUILDS_NEMO_GYM_RUNTIME, remove_project
from tests.support.nemo_gym_swe import (
    KEY,
    local_image_overrides,
    nemo_gym_row,
    run_rows,
    run_swebench_pro,
    with_mock_mode,
)

pytestmark = [pytest.mark.docker, BUILDS_NEMO_GYM_RUNTIME]

TASKS = ("intervals_merge", "leap_year_century")


def test_nemo_gyms_swebench_pro_scores_the_agents_fix_in_its_sandbox(nemo_gym_checkout, project, tmp_path):  # noqa: F811
    rows = [with_mock_mode(nemo_gym_row(nemo_gym_checkout, task), kind) for kind in ("oracle", "adversary") for task in TASKS]
    rollouts, output = run_swebench_pro(nemo_gym_checkout, project, tmp_path, rows)
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
    gold = nemo_gym_row(nemo_gym_checkout, first)
    patches = [gold["patch"], "", nemo_gym_row(nemo_gym_checkout, second)["patch"]]  # the last does not apply
    rows = [with_mock_mode({**gold, "patch": patch}, "plain") for patch in patches]
    rollouts, _ = run_swebench_pro(nemo_gym_checkout, project, tmp_path, rows, f"{KEY}.is_verifying_golden_patch=true")
    by_patch = {row["patch"]: row for row in rollouts}
    golden, empty, other = (by_patch[patch] for patch in patches)
    assert (golden["reward"], golden["resolved"], golden["patch_applied"]) == (1.0, True, True), golden["error"]
    assert (empty["reward"], empty["resolved"], empty["patch_applied"]) == (0.0, False, True)
    assert (other["reward"], other["resolved"], other["patch_applied"]) == (0.0, False, False)


@pytest.mark.parametrize("server", ["scale_swe", "swemer_v2", "swemer_v1", "swe_next", "swemer_oml"])
def test_nemo_gyms_golden_patch_validation_config_on_local_task_images(nemo_gym_checkout, tmp_path,  # noqa: F811
                                                                      server):
    # NeMo Gym's own golden-patch set-up: <server>_example.yaml's simple_agent and the
    # <server>_golden_patch_resources_server instance (is_verifying_golden_patch: true)
    gold = nemo_gym_row(nemo_gym_checkout, TASKS[0], server)
    patches = [gold["patch"], ""]
    rows = [{**gold, "patch": patch} for patch in patches]
    overrides = [argument for instance in (f"{server}_resources_server", f"{server}_golden_patch_resources_server")
                 for argument in local_image_overrides(instance=instance, implementation=server)]
    project = f"{PROJECT_PREFIX}-golden-{server.replace('_', '-')}"
    try:
        rollouts, _ = run_rows(nemo_gym_checkout, project, tmp_path, rows, f"{server}/{server}_example", *overrides,
                               f"++agent_name={server}_example_agent")
    finally:
        remove_project(project)
    by_patch = {row["patch"]: row for row in rollouts}
    golden, empty = (by_patch[patch] for patch in patches)
    assert (golden["reward"], golden["resolved"]) == (1.0, True), (golden["error"], golden.get("test_output", "")[-2000:])
    assert (empty["reward"], empty["resolved"]) == (0.0, False)
