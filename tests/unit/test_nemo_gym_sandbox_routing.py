"""The NeMo Gym runtime's launcher points a sandboxed server's `sandbox_provider` at the broker."""

from __future__ import annotations

import yaml

from gym_compose.sandbox.nemo_gym_routing import route_to_broker
from gym_compose.server.nemo_gym_launch import launch_environment


def test_a_named_block_of_another_provider_becomes_gym_compose_keeping_its_default_metadata():
    config = {"sandbox": {"docker": {"exec": {"concurrency": 8}}, "default_metadata": {"sandbox-api": "docker-cli"}}}
    notice = route_to_broker(config, {"sandbox_provider": "sandbox"})
    assert config["sandbox"] == {"gym_compose": {}, "default_metadata": {"sandbox-api": "docker-cli"}}
    assert notice is not None and "'docker'" in notice and "top-level `sandbox:`" in notice


def test_an_inline_block_is_rewritten_in_the_servers_spec():
    spec = {"sandbox_provider": {"opensandbox": {"connection": {"domain": "x"}}}}
    assert "inline" in (route_to_broker({}, spec) or "")
    assert spec["sandbox_provider"] == {"gym_compose": {}}


def test_gym_compose_blocks_and_servers_without_a_reference_are_left_alone():
    config = {"sandbox": {"gym_compose": {"max_live": 4}}}
    assert route_to_broker(config, {"sandbox_provider": "sandbox"}) is None
    assert config["sandbox"] == {"gym_compose": {"max_live": 4}}
    assert route_to_broker(config, {"sandbox_config": {"memory": "1g"}}) is None
    assert route_to_broker(config, {"sandbox_provider": "missing"}) is None  # NeMo Gym reports it


def test_the_launcher_routes_only_a_server_the_plan_gave_a_broker(tmp_path):
    folder = tmp_path / "responses_api_agents" / "swe"
    folder.mkdir(parents=True)
    (folder / "app.py").write_text("")
    config = {"swe": {"responses_api_agents": {"swe": {"entrypoint": "app.py", "host": "swe", "port": 8000,
                                                        "sandbox_provider": "sandbox"}}},
              "sandbox": {"e2b": {"template": "t"}}}
    environ = {"NEMO_GYM_CONFIG_DICT": yaml.safe_dump(config), "NEMO_GYM_CONFIG_PATH": "swe",
               "GYM_COMPOSE_SERVER_DIR": str(folder), "GYM_COMPOSE_SECRETS_DIR": str(tmp_path)}
    handed = yaml.safe_load(launch_environment(environ)[1]["NEMO_GYM_CONFIG_DICT"])
    assert handed["sandbox"] == {"e2b": {"template": "t"}}
    environ["GYM_COMPOSE_SANDBOX_BROKER"] = "http://sandbox-broker:8000"
    handed = yaml.safe_load(launch_environment(environ)[1]["NEMO_GYM_CONFIG_DICT"])
    assert handed["sandbox"] == {"gym_compose": {}}
