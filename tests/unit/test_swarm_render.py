"""The swarm target's renderer: the compose project in the subset `docker stack deploy` reads."""

from pathlib import Path

import pytest
import yaml

from gym_compose.plan.model import CollectorRun, StackOptions
from gym_compose.plan.planner import plan_stack
from gym_compose.render.swarm import load_collector_spec, swarm_model, write_swarm_project
from tests.support.plans import SOCKET, weather_config
from tests.support.plans import sandbox_stack_config as sandbox_config

IMAGES = {"base": "gym-compose/base:abc", "sandbox-broker": "gym-compose/sandbox_broker:def",
          "sandbox:coder": "gym-compose/sandbox:123"}


@pytest.fixture
def roots(tmp_path: Path) -> list[Path]:
    for name in ("weather_impl", "coder_impl", "plain_impl"):
        (tmp_path / "server_images" / name).mkdir(parents=True)
        (tmp_path / "server_images" / name / "app.py").write_text("print('hi')\n")
    return [tmp_path]


def test_limits_replicas_placement_and_ports_move_to_swarm_keys(roots):
    config = weather_config()
    config["weather"]["resources_servers"]["weather_impl"]["docker"] = {
        "memory": "2g", "cpus": 1.5, "replicas": 3, "placement": ["node.labels.pool==cpu"],
        "reservations": {"memory": "1g"}, "shm_size": "128m"}
    stack = plan_stack(config, roots, StackOptions(project="p", head_port=12000))
    model = swarm_model(stack, IMAGES)
    assert model["version"] == "3.9" and "name" not in model
    weather = model["services"]["weather"]
    for key in ("mem_limit", "cpus", "pids_limit", "restart", "security_opt", "tmpfs", "shm_size", "depends_on"):
        assert key not in weather, key
    assert weather["deploy"] == {
        "replicas": 3, "endpoint_mode": "dnsrr", "restart_policy": {"condition": "on-failure", "max_attempts": 1},
        "labels": {"io.gym-compose.project": "p"},
        "placement": {"constraints": ["node.labels.pool==cpu"]},
        "resources": {"limits": {"memory": "2G", "cpus": "1.5", "pids": 256}, "reservations": {"memory": "1G"}}}
    assert {"type": "tmpfs", "target": "/tmp", "tmpfs": {"size": 64 << 20}} in weather["volumes"]
    assert {"type": "tmpfs", "target": "/dev/shm", "tmpfs": {"size": 128 << 20}} in weather["volumes"]
    assert weather["read_only"] is True and weather["cap_drop"] == ["ALL"] and weather["init"] is True
    # the replicas' sessions: each task stamps its own (resolvable) name, all share one cookie key
    assert weather["environment"]["GYM_COMPOSE_REPLICA_ADDRESS"] == "{{.Task.Name}}:8000"
    assert weather["environment"]["GYM_COMPOSE_SESSION_KEY_FILE"] == "/run/secrets/session_key.weather"
    assert "session_key.weather" in weather["secrets"] and "session_key.weather" in model["secrets"]
    assert model["services"]["head"]["ports"] == [{"target": 11000, "published": 12000, "protocol": "tcp",
                                                   "mode": "host"}]
    assert model["networks"]["gym"]["driver"] == "overlay"
    assert "GYM_COMPOSE_REPLICA_ADDRESS" not in model["services"]["head"]["environment"]


def test_sandbox_networks_stay_internal_and_take_the_brokers_containers(roots):
    stack = plan_stack(sandbox_config({"image": "python:3.12-slim"}), roots, StackOptions(project="p"))
    from gym_compose.render.compose import RenderOptions

    model = swarm_model(stack, IMAGES, RenderOptions(docker_socket=SOCKET))
    control, sandboxes = model["networks"]["sandbox-control"], model["networks"]["sbx-coder"]
    assert control["internal"] and sandboxes["internal"] and sandboxes["attachable"]
    assert "driver_opts" not in sandboxes  # a bridge option; overlays have no host address anyway
    broker = model["services"]["sandbox-broker"]
    assert broker["user"] == "0:0" and "group_add" not in broker  # Swarm cannot add the socket's group
    # the server starts through the guard, with its alias on the overlay it shares with its sandboxes
    coder = model["services"]["coder"]
    assert coder["networks"] == {"gym": {}, "sandbox-control": {},
                                 "sbx-coder": {"aliases": ["gym-compose-sandbox-side"]}}
    assert coder["user"] == "0:0" and coder["cap_drop"] == ["ALL"]
    assert coder["cap_add"] == ["KILL", "NET_ADMIN", "SETGID", "SETPCAP", "SETUID"]
    assert coder["command"][:3] == ["python", "-m", "gym_compose.server.netguard"]
    assert coder["command"][-6:] == ["10001:10001", "--resolve-timeout=660", "--", "python", "-m",
                                     "gym_compose.server"]
    assert "security_opt" not in coder  # Swarm has none: the guard sets no-new-privileges itself


def test_written_project_has_absolute_secret_files_and_the_collector_beside_it(roots, tmp_path):
    stack = plan_stack(weather_config("sk-x"), roots, StackOptions(project="p"))
    rows = tmp_path / "rows.jsonl"
    rows.write_text("{}\n")
    stack_file = write_swarm_project(stack, IMAGES, tmp_path / "out", CollectorRun(rows, tmp_path / "run",
                                                                                   ["--host-lease"]))
    model = yaml.safe_load(stack_file.read_text())
    for secret in model["secrets"].values():
        assert Path(secret["file"]).is_absolute() and Path(secret["file"]).read_text() == "sk-x"
    assert "collector" not in model["services"]
    collector = load_collector_spec(stack_file)
    assert collector["entrypoint"] == ["python", "-m", "gym_compose.collect"]
    assert {v["target"] for v in collector["volumes"]} == {"/input/rows.jsonl", "/results"}


def test_under_swarm_egress_sandboxes_get_the_nodes_published_ports_closed(roots):
    """Swarm publishes on every interface of the node (an egress sandbox reaches the node), compose
    on 127.0.0.1: only the swarm broker is told to close the published ports in egress sandboxes."""
    from gym_compose.contract import SANDBOX_POLICY_ENV as POLICY_ENV
    from gym_compose.render.compose import RenderOptions, compose_model
    from gym_compose.sandbox.policy import BrokerSettings

    def settings(model) -> BrokerSettings:
        return BrokerSettings.model_validate_json(model["services"]["sandbox-broker"]["environment"][POLICY_ENV])

    for network, closed in (("egress", [11000, 11001, 11002]), ("internal", []), ("none", [])):
        options = StackOptions(project="p", publish_all=True)
        stack = plan_stack(sandbox_config({"image": "python:3.12-slim", "network": network}), roots, options)
        swarm = settings(swarm_model(stack, IMAGES, RenderOptions(docker_socket=SOCKET)))
        assert swarm.closed_node_ports == closed, network
        assert swarm.netns_image == ("gym-compose/sandbox_broker:def" if closed else None)
        compose_stack = plan_stack(sandbox_config({"image": "python:3.12-slim", "network": network}), roots,
                                   StackOptions(project="p", publish_all=True))
        compose = settings(compose_model(compose_stack, IMAGES, options=RenderOptions(docker_socket=SOCKET)))
        assert compose.closed_node_ports == [] and compose.netns_image is None
