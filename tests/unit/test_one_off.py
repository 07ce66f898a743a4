"""The collector's rendered compose service as a `docker run` command line (engine.one_off)."""

from __future__ import annotations

import json

import pytest
import yaml

from gym_compose.engine import docker_cli
from gym_compose.engine.targets.compose_project import ComposeProject
from gym_compose.engine.targets.one_off import UnsupportedServiceKey, docker_run_args, network_holder
from gym_compose.plan.model import CollectorRun
from gym_compose.plan.planner import plan_stack
from gym_compose.render.compose import write_project
from tests.support.plans import IMAGES, weather_config


@pytest.fixture
def compose_file(roots, tmp_path):  # noqa: F811
    rows = tmp_path / "rows, with a comma.jsonl"
    rows.write_text("{}\n")
    run = CollectorRun(input_file=rows, output_dir=tmp_path / "out", args=["--limit", "2"])
    return write_project(plan_stack(weather_config(), roots), IMAGES, tmp_path / "project", run)


def pairs(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args) if arg == flag]


def test_the_rendered_collector_becomes_the_same_container_under_docker_run(compose_file, tmp_path):
    model = yaml.safe_load(compose_file.read_text())
    spec = model["services"]["collector"]
    args = docker_run_args("p", "collector", spec, model["networks"])
    assert args[:5] == ["run", "--rm", "--interactive", "--pull", "never"]
    assert pairs(args, "--name")[0].startswith("p-collector-run-")
    labels = pairs(args, "--label")
    assert {"com.docker.compose.project=p", "com.docker.compose.service=collector",
            "com.docker.compose.oneoff=True", "io.gym-compose.role=collector"} <= set(labels)
    assert "--read-only" in args and "--init" in args
    assert pairs(args, "--cap-drop") == ["ALL"] and pairs(args, "--tmpfs") == ["/tmp:size=64m"]
    assert pairs(args, "--security-opt") == ["no-new-privileges:true"]
    assert pairs(args, "--user") == [spec["user"]] and pairs(args, "--memory") == ["1g"]
    assert pairs(args, "--pids-limit") == ["256"] and pairs(args, "--stop-timeout") == ["5"]
    assert pairs(args, "--network") == ["p_gym"]
    environment = dict(item.partition("=")[::2] for item in pairs(args, "--env"))
    assert environment == {key: str(value) for key, value in spec["environment"].items()}
    rows = (tmp_path / "rows, with a comma.jsonl").resolve()
    assert pairs(args, "--mount") == [f'type=bind,"source={rows}",target=/input/rows.jsonl,readonly',
                                      f"type=bind,source={(tmp_path / 'out').resolve()},target=/results"]
    image_at = args.index(IMAGES["base"])
    assert pairs(args, "--entrypoint") == ["python"]
    assert args[image_at + 1:] == ["-m", "gym_compose.collect", *spec["command"]]
    assert spec["command"][-2:] == ["--limit", "2"]


def test_a_key_without_a_translation_is_an_error_not_dropped():
    with pytest.raises(UnsupportedServiceKey, match="`ports`"):
        docker_run_args("p", "collector", {"image": "i", "ports": ["80:80"]}, {})


def test_a_named_network_keeps_its_name():
    args = docker_run_args("p", "c", {"image": "i", "networks": ["gym"]}, {"gym": {"name": "shared"}})
    assert pairs(args, "--network") == ["shared"]


def test_the_one_off_run_of_a_rendered_project_is_a_docker_run_reading_its_lease_from_our_pipe(
        compose_file, tmp_path, monkeypatch):
    script, got, calls = tmp_path / "docker", tmp_path / "stdin", tmp_path / "calls"
    script.write_text(f'#!/bin/sh\necho "$1 $2 $3" >> {calls}\ncat > {got}\n')
    script.chmod(0o755)
    monkeypatch.setattr(docker_cli, "DOCKER", str(script))
    with open(tmp_path / "log", "w") as log:
        run = ComposeProject("p", compose_file).run_one_off("collector", log)
        run.tell({"stop": "server x exited"})
        run.close_stdin()
        assert run.wait(30) == 0
    assert calls.read_text().split() == ["run", "--rm", "--interactive"]
    assert json.loads(got.read_text()) == {"stop": "server x exited"}


def test_the_collector_joins_the_one_environment_servers_network_namespace(compose_file):
    services = yaml.safe_load(compose_file.read_text())["services"]
    (environment,) = [name for name, spec in services.items()
                      if spec["labels"]["io.gym-compose.role"] == "environment"]
    holder = network_holder("p", "collector", services)
    assert holder == f"p-{environment}-1"
    args = docker_run_args("p", "collector", services["collector"], {}, network_of=holder)
    assert pairs(args, "--network") == [f"container:p-{environment}-1"]
    assert network_holder("p", environment, services) is None  # only the collector


def test_the_collector_has_its_own_endpoint_with_several_environment_servers_or_other_networks(compose_file):
    services = yaml.safe_load(compose_file.read_text())["services"]
    (environment,) = [name for name, spec in services.items()
                      if spec["labels"]["io.gym-compose.role"] == "environment"]
    other_networks = {**services, environment: {**services[environment], "networks": ["gym", "sbx-x"]}}
    assert network_holder("p", "collector", other_networks) is None
    two = {**services, "second-env": services[environment]}
    assert network_holder("p", "collector", two) is None
