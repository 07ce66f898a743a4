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
deepswe: swebench_mini's 8 tasks in DeepSWE's task layout (tests/support/nemo_gym_swe_rows.py),
written to the task store of the unpacked tree where NeMo Gym's prepare.py puts DeepSWE's
(`tasks_dir`, with `expected_task_count: 8`); gym-compose's coding agent, the mock model playing a
script: the fix committed 1.0 (two tasks), a wrong change committed 0.0, no change 0.0 (NeMo Gym's
collect hook takes committed work only: `git diff <base> HEAD`).
denovo_swe, through its own golden-patch set-up (denovo_swe_example.yaml), which grades the
image's own source (the row's patch is not read): the image of `<task>_solved`, a task folder
written in tmp_path holding swebench_mini's repository with the fix, 1.0; swebench_mini's own
image (the buggy base) 0.0.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.e2e import BUILDS_NEMO_GYM_RUNTIME, remove_project
from tests.support.nemo_gym_swe import (
    KEY,
    coding_agent,
    local_image_overrides,
    mini_rows,
    nemo_gym_row,
    run_rows,
    run_swebench_pro,
    task_folders_with_solved,
    with_mock_mode,
    with_mock_script,
)
from tests.support.nemo_gym_swe_rows import DEEPSWE_TASKS, task_tests, write_deepswe_store

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


def test_nemo_gyms_deepswe_grades_the_agents_committed_work(nemo_gym_checkout, project, tmp_path):  # noqa: F811
    minis = mini_rows()
    # swebench_mini's tasks in DeepSWE's task store, where NeMo Gym's prepare.py puts DeepSWE's
    count = write_deepswe_store(nemo_gym_checkout / DEEPSWE_TASKS, minis.values())
    submit = {"tool": "submit", "arguments": {}}

    def committed(task: str, command: str, *before: dict) -> dict:
        turn = {"tool": "bash", "arguments": {"command": f"{command} && git add -A && git commit -qm work"}}
        return with_mock_script(nemo_gym_row(nemo_gym_checkout, task, "deepswe"), *before, turn, submit)

    def fix(task: str) -> dict:
        write = {"tool": "str_replace_editor",
                 "arguments": {"command": "create", "path": "/tmp/fix.diff", "file_text": minis[task]["patch"]}}
        return committed(task, "git apply /tmp/fix.diff && rm /tmp/fix.diff", write)

    def changed(task: str) -> str:  # the file the task's fix changes
        return minis[task]["patch"].split("+++ b/", 1)[1].split("\n", 1)[0]

    first, second = TASKS
    cases = {"fix": fix(first), "fix2": fix(second),
             "wrong": committed(first, f"printf '# not a fix\\n' >> {changed(first)}"),
             "none": with_mock_script(nemo_gym_row(nemo_gym_checkout, first, "deepswe"), submit)}
    instance = "deepswe_resources_server"
    overrides = local_image_overrides(f"++{instance}.resources_servers.deepswe.expected_task_count={count}",
                                      instance=instance, implementation="deepswe", evaluation_timeout=None)
    rollouts, _ = run_rows(nemo_gym_checkout, project, tmp_path, list(cases.values()), "deepswe",
                           *coding_agent(instance), *overrides)
    case_of = {row["responses_create_params"]["metadata"]["gym_mock_script"]: case for case, row in cases.items()}
    scored = {case_of[r["responses_create_params"]["metadata"]["gym_mock_script"]]: r for r in rollouts}
    for case, task in (("fix", first), ("fix2", second)):
        mini, rollout = minis[task], scored[case]
        _, f2p, p2p = task_tests(mini)
        # NeMo Gym's response fields: its task store's id, the patch its collect hook took from the
        # agent's sandbox (committed work), and the counts its verifier read from the task's grader
        assert (rollout["reward"], rollout["evaluation_completed"], rollout["apply_failed"]) == (1.0, True, False), \
            (rollout["verifier_error"], rollout.get("test_output", "")[-2000:])
        assert rollout["task_id"] == f"swebench_mini__{task}"
        assert rollout["model_patch"].startswith(f"diff --git a/{changed(task)} b/{changed(task)}")
        assert rollout["model_patch_sha256"] == hashlib.sha256(rollout["model_patch"].encode()).hexdigest()
        assert (rollout["f2p_passed"], rollout["f2p_total"], rollout["p2p_passed"], rollout["p2p_total"]) == \
            (len(f2p), len(f2p), len(p2p), len(p2p))
    wrong, none = scored["wrong"], scored["none"]
    _, f2p, _ = task_tests(minis[first])
    assert (wrong["reward"], wrong["evaluation_completed"], wrong["apply_failed"]) == (0.0, True, False)
    assert "+# not a fix" in wrong["model_patch"] and wrong["f2p_passed"] < len(f2p) == wrong["f2p_total"]
    assert (none["reward"], none["evaluation_completed"], none["model_patch_bytes"]) == (0.0, True, 0)
    assert none["f2p_passed"] < len(f2p) and none["p2p_passed"] == none["p2p_total"] > 0


def test_nemo_gyms_denovo_swe_golden_path_grades_the_images_own_source(nemo_gym_checkout, tmp_path):  # noqa: F811
    # golden mode grades the package in the image (the patch is not read): the image built from
    # <task>_solved (swebench_mini's repository with the fix) passes every test, swebench_mini's
    # own image (the buggy base) fails FAIL_TO_PASS
    task = TASKS[0]
    folder = task_folders_with_solved(tmp_path / "tasks", task)
    buggy = nemo_gym_row(nemo_gym_checkout, task, "denovo_swe")
    solved = {**buggy, "instance_id": f"{buggy['instance_id']}_solved", "image_ref": f"swebench-mini:{task}_solved"}
    overrides = [argument for instance in ("denovo_swe_resources_server", "denovo_swe_golden_patch_resources_server")
                 for argument in local_image_overrides(instance=instance, implementation="denovo_swe", folder=folder)]
    project = f"{PROJECT_PREFIX}-golden-denovo-swe"
    try:
        rollouts, _ = run_rows(nemo_gym_checkout, project, tmp_path, [solved, buggy], "denovo_swe/denovo_swe_example",
                               *overrides, "++agent_name=denovo_swe_example_agent")
    finally:
        remove_project(project)
    by_id = {row["instance_id"]: row for row in rollouts}
    good, bad = by_id[solved["instance_id"]], by_id[buggy["instance_id"]]
    _, f2p, p2p = task_tests(mini_rows()[task])
    assert (good["reward"], good["resolved"], good["evaluation_completed"]) == (1.0, True, True), \
        (good["error"], good["test_output"][-2000:])
    assert (bad["reward"], bad["resolved"], bad["evaluation_completed"]) == (0.0, False, True), bad["error"]
    # NeMo Gym's evaluator's report (_denovoswe_eval.py, per test file)
    assert (good["test_results"]["passed"], good["test_results"]["total_expected"]) == (len(f2p + p2p), len(f2p + p2p))
    assert (bad["test_results"]["passed"], bad["test_results"]["failed"]) == (len(p2p), len(f2p))
