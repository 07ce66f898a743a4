"""Sandboxes in the plan and the compose project: what a config declares becomes a broker, its
networks, tokens and policy; what it may not declare is refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gym_compose.contract import SANDBOX_POLICY_ENV as POLICY_ENV
from gym_compose.contract import SANDBOX_SIDE_ALIAS
from gym_compose.errors import UserError
from gym_compose.plan.model import StackOptions
from gym_compose.plan.planner import plan_stack
from gym_compose.plan.sandbox_plan import BROKER_SERVICE, CONTROL_NETWORK
from gym_compose.render.compose import RenderOptions, compose_model, write_project
from gym_compose.sandbox.broker.launch import container_config
from gym_compose.sandbox.policy import BrokerSettings, LeaseRequest, SandboxPolicy, parse_size, refusal
from gym_compose.sandbox.tokens import server_token
from tests.support.plans import SOCKET, sandbox_compose_model, sandbox_stack_roots
from tests.support.plans import sandbox_stack_config as config

IMAGES = {"base": "gym-compose/base:abc", BROKER_SERVICE: "gym-compose/sandbox_broker:def",
          "sandbox:coder": "gym-compose/sandbox:123"}


@pytest.fixture
def roots(tmp_path: Path) -> list[Path]:
    return sandbox_stack_roots(tmp_path)


def model_of(data: dict, roots, images=IMAGES) -> dict:
    return sandbox_compose_model(data, roots, images)


def test_a_stack_without_sandboxes_has_no_broker(roots):
    stack = plan_stack(config(), roots, StackOptions(project="p"))
    assert stack.sandboxes is None
    assert BROKER_SERVICE not in model_of(config(), roots)["services"]


def test_declaring_server_gets_broker_networks_and_its_own_token(roots):
    model = model_of(config({"memory": "256m", "cpus": 0.5, "warm_pool": 2}), roots)
    broker, coder, plain = (model["services"][name] for name in (BROKER_SERVICE, "coder", "plain"))
    assert broker["networks"] == [CONTROL_NETWORK] and broker["user"] == "10001:10001" and broker["group_add"] == ["105"]
    assert coder["networks"] == {"gym": {}, CONTROL_NETWORK: {}, "sbx-coder": {"aliases": [SANDBOX_SIDE_ALIAS]}}
    assert plain["networks"] == ["gym"]
    assert coder["secrets"] == ["sandbox_token.coder"] and "secrets" not in plain
    assert coder["environment"]["GYM_COMPOSE_SANDBOX_BROKER"] == "http://sandbox-broker:8000"
    assert model["networks"][CONTROL_NETWORK]["internal"] and model["networks"]["sbx-coder"]["internal"]
    assert model["networks"]["sbx-coder"]["name"] == "p-sbx-coder"
    assert model["networks"]["sbx-coder"]["driver_opts"] == {"com.docker.network.bridge.inhibit_ipv4": "true"}
    settings = BrokerSettings.model_validate_json(broker["environment"][POLICY_ENV])
    policy = settings.servers["coder"]
    assert (policy.image, policy.memory_bytes, policy.cpus, policy.warm_pool) == ("gym-compose/sandbox:123", 256 << 20,
                                                                                   0.5, 2)
    assert policy.network_name == "p-sbx-coder" and settings.project == "p"


def test_only_the_broker_mounts_the_docker_socket(roots):
    model = model_of(config({}), roots)
    holders = [name for name, service in model["services"].items()
               if any("docker.sock" in json.dumps(volume) for volume in service.get("volumes", []))]
    assert holders == [BROKER_SERVICE]


def test_network_policies(roots):
    none = model_of(config({"network": "none"}), roots)
    assert none["services"]["coder"]["networks"] == ["gym", CONTROL_NETWORK] and "sbx-coder" not in none["networks"]
    egress = model_of(config({"network": "egress"}), roots)
    assert egress["networks"]["sbx-coder"]["internal"] is False and "driver_opts" not in egress["networks"]["sbx-coder"]
    with pytest.raises(UserError, match="network must be one of none, internal, egress"):
        model_of(config({"network": "host"}), roots)


GUARD = ["python", "-m", "gym_compose.server.netguard", "--sandbox-side", SANDBOX_SIDE_ALIAS]


@pytest.mark.parametrize("network", ["internal", "egress"])
def test_a_server_sharing_a_network_with_its_sandboxes_starts_through_the_guard(roots, network):
    model = model_of(config({"network": network}), roots)
    coder, plain = model["services"]["coder"], model["services"]["plain"]
    # root with only the guard's capabilities; the guard becomes the plan's user before the server runs
    assert coder["user"] == "0:0" and coder["cap_drop"] == ["ALL"]
    assert coder["cap_add"] == ["KILL", "NET_ADMIN", "SETGID", "SETPCAP", "SETUID"]
    assert coder["command"] == [*GUARD, "--user", "10001:10001", "--resolve-timeout=660", "--",
                                "python", "-m", "gym_compose.server"]
    assert coder["security_opt"] == ["no-new-privileges:true"] and coder["read_only"] is True
    # the alias names the server on its sandbox network only: what the guard closes
    assert coder["networks"]["sbx-coder"] == {"aliases": [SANDBOX_SIDE_ALIAS]}
    assert coder["networks"]["gym"] == coder["networks"][CONTROL_NETWORK] == {}
    # the broker and servers that share no network with sandboxes keep the plain hardening
    for other in (plain, model["services"][BROKER_SERVICE], model["services"]["head"]):
        assert "cap_add" not in other and "command" not in other and other["user"] != "0:0"


def test_a_server_whose_sandboxes_have_no_network_is_not_wrapped(roots):
    coder = model_of(config({"network": "none"}), roots)["services"]["coder"]
    assert coder["user"] == "10001:10001" and "command" not in coder and "cap_add" not in coder


def test_the_guard_gets_the_servers_own_user_and_capabilities(roots):
    data = config({"network": "internal"}, docker={"user": "server:server", "cap_add": ["cap_chown"]})
    coder = model_of(data, roots)["services"]["coder"]
    assert coder["user"] == "0:0" and coder["cap_add"] == ["CHOWN", "KILL", "NET_ADMIN", "SETGID", "SETPCAP", "SETUID"]
    assert coder["command"] == [*GUARD, "--user", "server:server", "--keep-cap=CHOWN", "--resolve-timeout=660", "--",
                                "python", "-m", "gym_compose.server"]


def test_a_nemo_gym_runtime_server_is_wrapped_around_its_launcher(roots):
    coder = model_of(config({"network": "egress"}, docker={"runtime": "nemo_gym"}), roots)["services"]["coder"]
    assert coder["labels"]["io.gym-compose.runtime"] == "nemo_gym"
    assert coder["command"] == [*GUARD, "--user", "10001:10001", "--resolve-timeout=660", "--",
                                "python", "-m", "gym_compose.server.nemo_gym_launch"]
    assert coder["user"] == "0:0" and "NET_ADMIN" in coder["cap_add"]


def test_nemo_gym_sandbox_config_and_provider_block(roots):
    data = config({"image": "my/img:1", "ttl_s": 600, "resources": {"cpu": 2, "memory_mib": 1024, "disk_gib": 30},
                   "provider_options": {"pull": True}}, sandbox_provider="sandbox")
    data["sandbox"] = {"docker": {"exec": {"concurrency": 4}}, "default_metadata": {"team": "x"}}
    stack = plan_stack(data, roots, StackOptions(project="p"))
    server = stack.sandboxes.server("coder")
    assert server.image == "my/img:1" and server.policy.cpus == 2 and server.policy.memory_bytes == 1 << 30
    assert server.policy.ttl_s == 600 and not server.policy.workdir_declared  # leases work in the image's WORKDIR
    declared = plan_stack(config({"workdir": "/srv/task"}), roots, StackOptions(project="p")).sandboxes.server("coder")
    assert (declared.policy.workdir, declared.policy.workdir_declared) == ("/srv/task", True)
    notices = "\n".join(stack.sandboxes.notices)
    assert "sandbox provider 'docker'" in notices and "disk_gib is not enforced" in notices
    assert "provider_options (pull) are not used" in notices


def test_a_memory_mib_with_a_unit_is_a_clear_error_naming_the_key(roots):
    # terminus_2_sandboxed_agent.yaml of NeMo Gym 0.7 says `memory_mib: 512MB`
    data = config({"image": "my/img:1", "resources": {"memory_mib": "512MB"}})
    with pytest.raises(UserError, match=r"resources.memory_mib must be a whole number of MiB, got '512MB'"):
        plan_stack(data, roots, StackOptions(project="p"))


def test_gym_compose_provider_block_sets_broker_limits(roots):
    data = config(sandbox_provider="sandbox")
    data["sandbox"] = {"gym_compose": {"max_live": 8, "max_starting": 3, "max_snapshots": 5}}
    stack = plan_stack(data, roots, StackOptions(project="p"))
    assert (stack.sandboxes.options.max_live, stack.sandboxes.options.max_starting) == (8, 3)
    assert stack.sandboxes.options.max_snapshots == 5
    assert stack.sandboxes.notices == []


def test_fork_from_seed_is_a_known_key_checked_by_the_plan(roots):
    stack = plan_stack(config({"fork_from_seed": 16}), roots, StackOptions(project="p"))
    assert stack.sandboxes.notices == []


@pytest.mark.parametrize("block, message", [
    ({"provider_options": {"volumes": ["/:/host"]}}, "volumes refused"),
    ({"cap_add": ["SYS_ADMIN"]}, "SYS_ADMIN may not be given"),
    ({"memory": "lots"}, "not a size"),
    ({"resources": {"gpu": 1}}, "no GPUs"),
    ({"image": "a", "build": "b"}, "not both"),
    ({"build": "../elsewhere"}, "not a folder inside"),
    ({"pids": 2}, "pids must be at least 16"),
    ({"warm_pool": "many"}, "warm_pool"),
    ({"fork_from_seed": -1}, "fork_from_seed must be a whole number from 0 to 65"),
    ({"fork_from_seed": "all"}, "fork_from_seed must be a whole number"),
])
def test_refused_declarations_name_the_key(roots, block, message):
    with pytest.raises(UserError, match=message) as error:
        plan_stack(config(block), roots, StackOptions(project="p"))
    assert "coder.sandbox_config" in str(error.value)


def test_a_reference_to_a_missing_provider_block_gets_gym_compose_sandboxes_with_a_notice(roots):
    # NeMo Gym's SWE configs name `sandbox_provider: sandbox` and leave the block to a provider file
    stack = plan_stack(config(sandbox_provider="my_box"), roots, StackOptions(project="p"))
    assert any("'my_box'" in notice and "no top-level `my_box:` block" in notice and "gym-compose sandboxes" in notice
               for notice in stack.sandboxes.notices)
    assert stack.network_config["my_box"] == stack.host_config["my_box"] == {"gym_compose": {}}


def test_a_provider_reference_to_a_value_that_is_no_block_is_an_error(roots):
    with pytest.raises(UserError, match="`my_box:` is not a provider block"):
        plan_stack({**config(sandbox_provider="my_box"), "my_box": "docker"}, roots, StackOptions(project="p"))


def test_a_near_miss_key_is_flagged(roots):
    stack = plan_stack(config({"warmpool": 3}), roots, StackOptions(project="p"))
    assert any("did you mean 'warm_pool'" in notice for notice in stack.sandboxes.notices)


def test_secrets_are_written_and_the_project_secret_survives_a_rerender(roots, tmp_path):
    stack = plan_stack(config({}), roots, StackOptions(project="p"))
    out = tmp_path / "out"
    write_project(stack, IMAGES, out, options=RenderOptions(docker_socket=SOCKET))
    secret = (out / "secrets" / "sandbox_broker_token").read_text()
    assert len(secret) == 64
    assert (out / "secrets" / "sandbox_token.coder").read_text() == server_token(secret, "coder")
    write_project(plan_stack(config({}), roots, StackOptions(project="p")), IMAGES, out,
                  options=RenderOptions(docker_socket=SOCKET))
    assert (out / "secrets" / "sandbox_broker_token").read_text() == secret
    rendered = yaml.safe_load((out / "compose.yaml").read_text())
    assert set(rendered["secrets"]) == {"sandbox_broker_token", "sandbox_token.coder"}
    assert secret not in (out / "compose.yaml").read_text()


def test_rootless_or_unknown_socket_runs_the_broker_as_container_root(roots):
    stack = plan_stack(config({}), roots, StackOptions(project="p"))
    rootless = compose_model(stack, IMAGES, options=RenderOptions(docker_socket=("/run/user/1000/docker.sock", 1000,
                                                                                  True)))
    broker = rootless["services"][BROKER_SERVICE]
    assert broker["user"] == "0:0" and "group_add" not in broker
    assert broker["volumes"][0]["source"] == "/run/user/1000/docker.sock"


def test_container_config_is_never_privileged_and_joins_only_the_plans_network():
    policy = SandboxPolicy(server="coder", image="img", memory_bytes=256 << 20, cpus=4, pids=64, read_only=True,
                           network="internal", network_name="p-sbx-coder", cap_add=["CHOWN", "SYS_ADMIN"])
    config = container_config("p", policy, "img", engine_cpus=2)
    host = config["HostConfig"]
    assert host["Privileged"] is False and host["Binds"] is None and host["Mounts"] is None and host["Devices"] is None
    assert host["CapDrop"] == ["ALL"] and host["CapAdd"] == ["CHOWN"]
    assert host["SecurityOpt"] == ["no-new-privileges:true"] and host["ReadonlyRootfs"]
    assert host["Memory"] == host["MemorySwap"] == 256 << 20 and host["PidsLimit"] == 64
    assert host["NanoCpus"] == 2_000_000_000  # clamped to the engine's cores
    assert host["NetworkMode"] == "p-sbx-coder" and "/work" in host["Tmpfs"]
    assert config["Labels"]["io.gym-compose.project"] == "p" and config["StdinOnce"] and not config["Tty"]
    none = container_config("p", policy.model_copy(update={"network": "none"}), "img", engine_cpus=2)
    assert none["HostConfig"]["NetworkMode"] == "none"


def test_lease_refusals_and_request_shape():
    policy = SandboxPolicy(server="coder", image="img:1", allowed_images=["swe/*:latest"], cpus=1, memory_bytes=1 << 30)
    assert refusal(policy, LeaseRequest(), "img:1") is None
    assert refusal(policy, LeaseRequest(), "swe/task-9:latest") is None
    assert "not in the plan" in refusal(policy, LeaseRequest(), "swe/task-9:other")
    assert "exceeds" in refusal(policy, LeaseRequest(memory_mib=2048), "img:1")
    assert "run_args" in refusal(policy, LeaseRequest(provider_options={"run_args": ["--privileged"]}), "img:1")
    for field in ("privileged", "mounts", "network", "binds", "devices"):
        with pytest.raises(ValueError, match="Extra inputs"):
            LeaseRequest.model_validate({field: True})
    assert parse_size("512m") == 512 << 20 and parse_size("1.5g") == 3 << 29 and parse_size(1024) == 1024
