"""SWE benchmarks in the plan, with no Docker: per-task images declared in sandbox_config reach
the broker's policy as aliases, pulled images as a policy flag; the shipped configs plan; the
check before start names missing rows and an unreachable registry in one message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_compose.config import load
from gym_compose.config.request import ConfigRequest
from gym_compose.engine.registry_manifests import ManifestAnswer
from gym_compose.errors import UserError
from gym_compose.paths import PROJECT_ROOT
from gym_compose.plan.model import StackOptions
from gym_compose.plan.planner import plan_stack
from gym_compose.render.sandbox_services import broker_settings
from gym_compose.stack.swe_preflight import check_pulled_images, registry_host


def planned(benchmark: str, *overrides: str):
    loaded = load(ConfigRequest(benchmarks=[benchmark], overrides=list(overrides)), cwd=PROJECT_ROOT)
    return loaded, plan_stack(loaded.data, loaded.search_roots, StackOptions(project="p"))


def test_swebench_mini_declares_its_task_images_and_the_agent_only_sandbox_access():
    _, stack = planned("swebench_mini")
    verifier = stack.sandboxes.server("swebench_mini_resources_server")
    assert verifier.task_images.folder == PROJECT_ROOT / "benchmarks" / "swebench_mini" / "tasks"
    assert verifier.task_images.repository == "swebench-mini" and verifier.policy.network == "none"
    assert stack.sandboxes.server("swebench_mini_coding_agent").policy.network == "none"
    images = {"base": "b", "sandbox-broker": "k", verifier.image_key: "s", "sandbox:swebench_mini_coding_agent": "s",
              verifier.task_image_key("swebench-mini:pager_last_page"): "gym-compose/swebench-mini:pager_last_page-1"}
    settings = broker_settings(stack, images)
    policy = settings.servers["swebench_mini_resources_server"]
    assert policy.image_aliases == {"swebench-mini:pager_last_page": "gym-compose/swebench-mini:pager_last_page-1"}
    assert policy.allows_image("swebench-mini:pager_last_page") and not policy.allows_image("swebench-mini:other")
    assert settings.servers["swebench_mini_coding_agent"].image_aliases == {}


def test_swebench_pro_sandboxes_reach_the_package_indexes_only_through_a_proxy():
    _, stack = planned("swebench_pro")
    verifier = stack.sandboxes.server("swebench_pro_resources_server")
    assert verifier.policy.network == "allowlist" and verifier.proxy_service == "swebench-pro-resources-server-egress-proxy"
    assert verifier.policy.egress_allow == ["pypi.org", "files.pythonhosted.org", "registry.npmjs.org",
                                            "registry.yarnpkg.com", "proxy.golang.org", "sum.golang.org"]
    # the coding agent runs its commands in the verifier's sandboxes (handed over), having none of its own
    assert stack.sandboxes.server("swebench_pro_coding_agent").policy.network == "none"
    assert stack.sandboxes.proxy_services() == [verifier.proxy_service]


def test_swebench_pro_pulls_its_images_within_the_memory_cap():
    _, stack = planned("swebench_pro")
    policy = stack.sandboxes.server("swebench_pro_resources_server").policy
    assert policy.pull and policy.memory_bytes == 30720 << 20 and policy.cpus == 4
    assert policy.allows_image("docker.io/jefzda/sweap-images:nodebb.nodebb-NodeBB__NodeBB-1")
    assert policy.allows_image("docker.io/jefzda/sweap-images@sha256:" + "0" * 64)
    assert not policy.allows_image("docker.io/library/ubuntu:22.04")


def test_task_images_must_name_a_folder_and_a_repository():
    with pytest.raises(UserError, match="task_images must be a mapping with `folder`"):
        planned("swebench_mini", "++swebench_mini_resources_server.resources_servers.swebench_pro.sandbox_config."
                "task_images.repository=null")
    with pytest.raises(UserError, match="is not a folder"):
        planned("swebench_mini", "++swebench_mini_resources_server.resources_servers.swebench_pro.sandbox_config."
                "task_images.folder=benchmarks/nope")


def test_registry_hosts():
    assert registry_host("docker.io/jefzda/sweap-images") == "registry-1.docker.io"
    assert registry_host("jefzda/sweap-images") == "registry-1.docker.io"
    assert registry_host("ghcr.io/org/images") == "ghcr.io" and registry_host("localhost:5000/x") == "localhost:5000"


def pro_rows(tmp_path: Path, count: int = 2) -> Path:
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"instance_id": f"i{n}", "dockerhub_tag": f"tag{n}", "image_digest": ""}) + "\n"
                            for n in range(count)))
    return rows


def test_the_check_names_both_missing_rows_and_registry(tmp_path):
    loaded, _ = planned("swebench_pro", "++swebench_pro_coding_agent.responses_api_agents.coding_agent.datasets.0."
                        f"jsonl_fpath={tmp_path}/missing.jsonl")
    probed = []
    with pytest.raises(UserError) as raised:
        check_pulled_images(loaded.data, loaded.search_roots, image_present=lambda image: False,
                            probe=lambda host: probed.append(host) or "DNS failure")
    message = str(raised.value)
    assert "no prepared rows" in message and "missing.jsonl" in message and "eval prepare" in message
    assert "no container registry: registry-1.docker.io cannot be reached (DNS failure)" in message
    assert "swebench_mini" in raised.value.hint and probed == ["registry-1.docker.io"]


def test_the_check_passes_with_rows_and_local_images_or_a_registry(tmp_path):
    rows = pro_rows(tmp_path)
    loaded, _ = planned("swebench_pro", "++swebench_pro_coding_agent.responses_api_agents.coding_agent.datasets.0."
                        f"jsonl_fpath={rows}")
    asked = []
    check_pulled_images(loaded.data, loaded.search_roots, image_present=lambda image: asked.append(image) or True,
                        probe=lambda host: pytest.fail("no registry needed when every image is local"))
    assert sorted(asked) == ["docker.io/jefzda/sweap-images:tag0", "docker.io/jefzda/sweap-images:tag1"]
    check_pulled_images(loaded.data, loaded.search_roots, image_present=lambda image: image.endswith("tag0"),
                        probe=lambda host: None, manifests=lambda images: {i: ManifestAnswer(i, True, 1) for i in images})
    with pytest.raises(UserError, match="1 of the rows' images are not on this Docker engine") as raised:
        check_pulled_images(loaded.data, loaded.search_roots, image_present=lambda image: image.endswith("tag0"),
                            probe=lambda host: "refused")
    assert "no prepared rows" not in str(raised.value)


def test_an_input_file_stands_for_the_datasets(tmp_path):
    loaded, _ = planned("swebench_pro", "++swebench_pro_coding_agent.responses_api_agents.coding_agent.datasets.0."
                        f"jsonl_fpath={tmp_path}/missing.jsonl")
    check_pulled_images(loaded.data, loaded.search_roots, pro_rows(tmp_path), image_present=lambda image: True,
                        probe=lambda host: "unreachable")


def test_swebench_mini_needs_no_check():
    loaded, _ = planned("swebench_mini")
    check_pulled_images(loaded.data, loaded.search_roots, image_present=lambda image: False,
                        probe=lambda host: pytest.fail("swebench_mini pulls nothing"))


def test_nemo_gyms_own_swebench_pro_config_plans_with_its_images_pulled(tmp_path):
    """NeMo Gym's resources_servers/swebench_pro config, unchanged, served by the built-in
    verifier: its images (which it names only by image_repository) are allowed and pulled."""
    nemo_gym = PROJECT_ROOT / "tests" / "fixtures" / "swebench_pro"
    loaded = load(ConfigRequest(resources_servers=["swebench_pro"], search_dirs=[nemo_gym],
                                overrides=["++sandbox.docker={}"]), cwd=tmp_path)
    assert loaded.data["swebench_pro_resources_server"]["resources_servers"]["swebench_pro"]["apply_anti_cheating"]
    stack = plan_stack(loaded.data, loaded.search_roots, StackOptions(project="p"))
    policy = stack.sandboxes.server("swebench_pro_resources_server").policy
    assert policy.pull and policy.allows_image("docker.io/jefzda/sweap-images@sha256:" + "a" * 64)
    assert policy.allows_image("docker.io/jefzda/sweap-images:tag") and not policy.allows_image("other/image:tag")
    verifier = next(s for s in stack.services if s.instance == "swebench_pro_resources_server")
    assert verifier.source_dir is None  # the built-in verifier, not NeMo Gym's app.py
    with pytest.raises(UserError, match="no container registry: registry-1.docker.io"):
        check_pulled_images(loaded.data, loaded.search_roots, image_present=lambda image: False,
                            probe=lambda host: "unreachable")
