"""SWE rows whose sandbox image the plan would refuse are refused before anything starts, and a
verifier's allowed images follow its image_repository / image_template (runs/swe_row_images.py,
swe/sandbox_defaults.py). No Docker: the plan and the row checks only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_compose.config import load
from gym_compose.config.request import ConfigRequest
from gym_compose.errors import UserError
from gym_compose.paths import PROJECT_ROOT
from gym_compose.plan.model import StackOptions
from gym_compose.plan.planner import plan_stack
from gym_compose.runs.run_inputs import CollectionArgs, plan_run

PRO = "swebench_pro_resources_server.resources_servers.swebench_pro"
MINI = "swebench_mini_resources_server.resources_servers.swebench_pro"
MINI_ROWS = PROJECT_ROOT / "benchmarks/swebench_mini/data/swebench_mini.jsonl"
MIRROR = "registry.example:5000/mirror/sweap-images"


def planned(benchmark: str, *overrides: str):
    loaded = load(ConfigRequest(benchmarks=[benchmark], overrides=list(overrides)), cwd=PROJECT_ROOT)
    return loaded, plan_stack(loaded.data, loaded.search_roots, StackOptions(project="p"))


def swe_rows(tmp_path: Path, agent: str, count: int = 3, **changes) -> Path:
    """swebench_mini's rows (SWE-bench Pro's format) routed to `agent`; `changes` on the last one."""
    rows = [json.loads(line) for line in MINI_ROWS.read_text().splitlines()[:count]]
    rows = [{**row, "agent_ref": {"name": agent}} for row in rows]
    rows[-1].update(changes)
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run_rows(loaded, stack, rows: Path):
    return plan_run(loaded, stack, CollectionArgs(input_file=rows, results_dir=rows.parent / "results"))


def test_a_mirror_as_image_repository_is_what_the_verifier_may_start():
    _, stack = planned("swebench_pro", f"++{PRO}.image_repository={MIRROR}")
    policy = stack.sandboxes.server("swebench_pro_resources_server").policy
    assert policy.allowed_images == [f"{MIRROR}:*", f"{MIRROR}@*"] and policy.pull
    assert policy.allows_image(f"{MIRROR}:nodebb.nodebb-NodeBB__NodeBB-1")
    assert not policy.allows_image("docker.io/jefzda/sweap-images:nodebb.nodebb-NodeBB__NodeBB-1")


def test_the_mirrors_rows_pass_and_every_image_before_started_nothing(tmp_path):
    loaded, stack = planned("swebench_pro", f"++{PRO}.image_repository={MIRROR}")
    assert run_rows(loaded, stack, swe_rows(tmp_path, "swebench_pro_coding_agent")).name == "rows"


def test_an_image_template_becomes_the_allowed_pattern_and_a_field_rows_lack_is_refused(tmp_path):
    template = "registry.example/swe/{instance_id}:{dockerhub_tag}"
    loaded, stack = planned("swebench_pro", f"++{PRO}.image_template='{template}'")
    policy = stack.sandboxes.server("swebench_pro_resources_server").policy
    assert policy.allowed_images == ["registry.example/swe/*:*"]
    run_rows(loaded, stack, swe_rows(tmp_path, "swebench_pro_coding_agent"))
    with pytest.raises(UserError, match=r"\{tag\} is not a field of a row's image") as refused:
        planned("swebench_pro", f"++{PRO}.image_template='registry.example/swe:{{tag}}'")
    assert "{dockerhub_tag}" in refused.value.hint
    with pytest.raises(UserError, match="is not a format string"):
        planned("swebench_pro", f"++{PRO}.image_template='registry.example/swe:{{dockerhub_tag'")


def test_allowed_images_set_apart_from_image_repository_refuse_the_rows_naming_row_image_and_key(tmp_path):
    loaded, stack = planned("swebench_pro", f"++{PRO}.image_repository={MIRROR}",
                            f"++{PRO}.sandbox_config.allowed_images=['docker.io/jefzda/sweap-images:*']")
    rows = swe_rows(tmp_path, "swebench_pro_coding_agent")
    with pytest.raises(UserError) as refused:
        run_rows(loaded, stack, rows)
    message, hint = str(refused.value), refused.value.hint
    first_tag = json.loads(MINI_ROWS.read_text().splitlines()[0])["dockerhub_tag"]
    assert message.startswith(f"{rows}, line 1: ") and f"{MIRROR}:{first_tag}" in message and "403" in message
    assert f"{PRO}.sandbox_config.allowed_images" in hint and f'["{MIRROR}:*"]' in hint
    assert not (tmp_path / "results").exists()  # refused before anything was written


def test_a_row_whose_task_image_the_plan_does_not_build_is_refused(tmp_path):
    loaded, stack = planned("swebench_mini")
    rows = swe_rows(tmp_path, "swebench_mini_coding_agent", dockerhub_tag="no_such_task")
    with pytest.raises(UserError) as refused:
        run_rows(loaded, stack, rows)
    assert str(refused.value).startswith(f"{rows}, line 3: the row's task image 'swebench-mini:no_such_task'")
    assert "has no folder 'no_such_task'" in str(refused.value) and "dockerhub_tag" in refused.value.hint
    run_rows(loaded, stack, swe_rows(tmp_path, "swebench_mini_coding_agent"))  # the shipped rows pass


def test_a_row_the_verifier_cannot_read_is_refused_naming_its_fields(tmp_path):
    loaded, stack = planned("swebench_mini")
    rows = swe_rows(tmp_path, "swebench_mini_coding_agent", count=2)
    lines = rows.read_text().splitlines()
    broken = json.loads(lines[1])
    del broken["base_commit"], broken["run_script"]
    rows.write_text(lines[0] + "\n" + json.dumps(broken) + "\n")
    with pytest.raises(UserError) as refused:
        run_rows(loaded, stack, rows)
    message = str(refused.value)
    assert message.startswith(f"{rows}, line 2: swebench_mini_resources_server cannot read the row")
    assert "base_commit" in message and "run_script" in message
    rows = swe_rows(tmp_path, "swebench_mini_coding_agent", count=1, fail_to_pass="[not a list")
    with pytest.raises(UserError, match="line 1: .* cannot read the row's test lists"):
        run_rows(loaded, stack, rows)


def test_rows_of_agents_without_a_swe_verifier_are_not_read_as_swe_rows(tmp_path):
    loaded, stack = planned("example_single_tool_call")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"responses_create_params": {"input": "hi"}}) + "\n")
    assert run_rows(loaded, stack, rows).name == "rows"
