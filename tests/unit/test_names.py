"""Generated names fit every target's limits by themselves (gym_compose/contract.py), at their edges."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gym_compose.config import load
from gym_compose.config.request import ConfigRequest
from gym_compose.contract import DNS_LABEL, INSTANCE_LABEL, MAX_PROJECT, SWARM_SECRET, service_budget, shortened
from gym_compose.engine.targets.deployed_stack import ServiceState
from gym_compose.errors import UserError
from gym_compose.plan.model import StackOptions
from gym_compose.plan.planner import plan_stack, service_name
from gym_compose.render.compose import compose_model
from gym_compose.render.kubernetes import INSTANCE_ANNOTATION, kubernetes_manifests
from gym_compose.render.swarm import swarm_model
from gym_compose.sandbox.broker.launch import container_name
from gym_compose.sandbox.broker.pod import pod_name
from gym_compose.stack.table import print_services

IMAGES = {"base": "gym-compose/base:abc", "sandbox-broker": "gym-compose/sandbox_broker:def"}
DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DEFAULT_BUDGET = DNS_LABEL - len("gym-compose") - len("-") - len("-1")  # 49


def test_a_name_that_fits_is_kept_and_a_longer_one_is_cut_to_the_limit_with_a_hash():
    for length in (62, 63):
        name = "a" * length
        assert shortened(name, 63) == name
    long = "b" * 64
    cut = shortened(long, 63)
    assert len(cut) == 63 and cut.startswith("b" * 54 + "-") and re.fullmatch(r"[0-9a-f]{8}", cut[-8:])
    assert shortened(long, 63) == cut  # stable
    assert shortened("b" * 63 + "c", 63) != cut  # the same first characters, another name
    assert shortened("x-" * 40, 20).count("--") == 0  # no separator left dangling before the hash


def test_service_names_fit_their_project_at_the_edges():
    assert service_budget("gym-compose") == DEFAULT_BUDGET
    for length in (DEFAULT_BUDGET - 1, DEFAULT_BUDGET):
        instance = "s" * length
        assert service_name(instance) == instance
    over = service_name("s" * (DEFAULT_BUDGET + 1))
    assert len(over) == DEFAULT_BUDGET and over != "s" * DEFAULT_BUDGET
    assert service_name("Weather_Agent") == "weather-agent"
    assert service_name("a.b__c") == "a-b-c"
    # the hash is the instance name's: two names with one DNS-safe spelling stay apart once cut
    assert service_name("x_" * 40) != service_name("x-" * 40)
    with pytest.raises(UserError):
        service_name("___")


def long_config(*instances: str) -> dict:
    """Model servers (built-in mock, no folder needed) under the given instance names, plus an agent
    and environment that chain to the first, so the config's host fields must name the shortened services."""
    first = instances[0]
    config = {name: {"responses_api_models": {"mock_model": {"entrypoint": "app.py"}}} for name in instances}
    config["a_" * 30 + "agent"] = {"responses_api_agents": {"simple_agent": {
        "entrypoint": "app.py", "model_server": {"type": "responses_api_models", "name": first}}}}
    config["e_" * 30 + "environment"] = {"environment_servers": {"legacy_agent": {
        "entrypoint": "app.py", "agent_server": {"type": "responses_api_agents", "name": "a_" * 30 + "agent"}}}}
    return config


def every_generated_name_fits(stack) -> None:
    project = stack.project
    compose = compose_model(stack, IMAGES)
    for service in compose["services"]:
        assert DNS_LABEL_RE.fullmatch(service) and len(f"{project}-{service}-1") <= DNS_LABEL, service
    swarm = swarm_model(stack, IMAGES)
    for service in swarm["services"]:
        assert len(f"{project}_{service}") <= DNS_LABEL, service
    for secret in (swarm.get("secrets") or {}).values():
        assert len(secret["name"]) <= SWARM_SECRET, secret
    for network in swarm["networks"].values():
        assert len(network.get("name", f"{project}_x")) <= DNS_LABEL
    manifests, secret = kubernetes_manifests(stack, IMAGES)
    for manifest in [*manifests, *([secret] if secret else [])]:
        name = manifest["metadata"]["name"]
        limit = DNS_LABEL if manifest["kind"] in ("Service", "Job") else 253
        assert len(name) <= limit and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name), (manifest["kind"], name)
        for value in manifest["metadata"].get("labels", {}).values():
            assert len(value) <= DNS_LABEL, value


@pytest.mark.parametrize("project_length", [1, MAX_PROJECT - 1, MAX_PROJECT])
def test_every_name_of_a_long_instance_fits_every_target_whatever_the_project(project_length):
    project = "p" * project_length
    instances = ["m" * 70 + "_one", "m" * 70 + "_two"]  # the same first 70 characters: apart only after the cut
    stack = plan_stack(long_config(*instances), [], StackOptions(project=project))
    services = {s.instance: s.name for s in stack.services if s.instance}
    assert len(set(services.values())) == len(services)  # no collision after shortening
    assert all(len(name) <= service_budget(project) for name in services.values())
    every_generated_name_fits(stack)
    # peers find each other under the shortened names; the head's view keeps the instance names as keys
    for instance, name in services.items():
        server_type = next(iter(stack.network_config[instance]))
        block = next(iter(stack.network_config[instance][server_type].values()))
        assert block["host"] == name
        assert instance in stack.host_config
    manifests, _ = kubernetes_manifests(stack, IMAGES)
    annotated = {m["metadata"]["name"]: m["metadata"]["annotations"][INSTANCE_ANNOTATION]
                 for m in manifests if m["kind"] == "Deployment" and "annotations" in m["metadata"]}
    assert annotated == {name: instance for instance, name in services.items()}
    labels = {name: spec["labels"][INSTANCE_LABEL] for name, spec in compose_model(stack, IMAGES)["services"].items()
              if INSTANCE_LABEL in spec["labels"]}
    assert labels == {name: instance for instance, name in services.items()}


def test_a_project_name_too_long_for_any_service_name_is_refused_naming_the_limit():
    with pytest.raises(UserError) as refused:
        plan_stack(long_config("m"), [], StackOptions(project="p" * (MAX_PROJECT + 1)))
    message = str(refused.value)
    assert f"{MAX_PROJECT + 1} characters" in message and "PROJECT_SERVICE" in message and "63" in message
    assert f"at most {MAX_PROJECT} characters" in refused.value.hint


def test_the_default_project_renders_the_example_benchmark_for_swarm():
    loaded = load(ConfigRequest(benchmarks=["example_single_tool_call"]))
    stack = plan_stack(loaded.data, loaded.search_roots, StackOptions(project="gym-compose"))
    model = swarm_model(stack, IMAGES)  # raised "... at most 63 characters" before
    environment = "example_single_tool_call_benchmark_environment_server"
    name = stack_name(stack, environment)
    assert name in model["services"] and len(f"gym-compose_{name}") <= DNS_LABEL
    assert name.startswith("example-single-tool-call-benchmark-") and len(name) == DEFAULT_BUDGET
    every_generated_name_fits(stack)


def stack_name(stack, instance: str) -> str:
    return next(s.name for s in stack.services if s.instance == instance)


def test_swarm_secrets_fit_with_a_long_project_and_keep_their_file_name():
    config = long_config("m")
    config["m"]["responses_api_models"]["mock_model"]["required_api_key"] = "sk-long-enough"  # a secret
    stack = plan_stack(config, [], StackOptions(project="p" * MAX_PROJECT))
    (key,) = stack.secrets
    model = swarm_model(stack, IMAGES)
    assert len(f"{stack.project}_{key}") > SWARM_SECRET  # what Swarm would have refused
    assert len(model["secrets"][key]["name"]) <= SWARM_SECRET
    assert key in model["services"]["m"]["secrets"]  # mounted at /run/secrets/KEY, as the config says


def test_sandbox_containers_and_pods_keep_the_suffix_that_tells_them_apart():
    project, server = "p" * MAX_PROJECT, "s" * 60
    names = {container_name(project, server, suffix) for suffix in ("0a1b2c3d", "4e5f6a7b")}
    assert len(names) == 2 and all(len(name) <= DNS_LABEL for name in names)
    assert len({pod_name(name) for name in names}) == 2
    assert container_name("p", "coder", "0a1b2c3d") == "p-sbx-coder-0a1b2c3d"


def test_ps_shows_the_instance_of_a_shortened_service_only(capsys):
    states = [ServiceState("head", "c1", "running", "healthy", 0),
              ServiceState("policy-model", "c2", "running", "healthy", 0)]
    print_services(states, {"policy-model": "policy_model"})
    assert "INSTANCE" not in capsys.readouterr().out
    long = "m" * 70
    states.append(ServiceState(service_name(long), "c3", "running", "healthy", 0))
    print_services(states, {"policy-model": "policy_model", service_name(long): long})
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["SERVICE", "INSTANCE"] and long in out[3]
    assert out[1].split()[1] == "-"  # the head has no instance


def test_ps_reads_the_instances_from_the_rendered_project(tmp_path, monkeypatch):
    from gym_compose.stack.state import project_dir, rendered_instances

    monkeypatch.setenv("GYM_COMPOSE_STATE_DIR", str(tmp_path))
    stack = plan_stack(long_config("m" * 70), [], StackOptions(project="p"))
    project_dir("p").mkdir(parents=True)
    (project_dir("p") / "compose.yaml").write_text(yaml.safe_dump(compose_model(stack, IMAGES)))
    assert rendered_instances("p")[stack_name(stack, "m" * 70)] == "m" * 70
    assert rendered_instances("other") == {}


def test_a_long_local_vllm_instance_gets_an_engine_name_that_fits():
    config = {"v" * 70: {"responses_api_models": {"local_vllm_model": {"entrypoint": "app.py", "model": "m"}}}}
    stack = plan_stack(config, [Path("/nonexistent")], StackOptions(project="p" * MAX_PROJECT))
    engine = next(s for s in stack.services if s.role == "engine")
    assert len(engine.name) <= service_budget(stack.project) and engine.name != stack_name(stack, "v" * 70)
    every_generated_name_fits(stack)
