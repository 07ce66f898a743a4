"""The Python API's planning, no Docker: `RunHelper`'s global config dict as NeMo RL builds it, and
`Stack.from_configs`' options (where the head binds, what the host view names)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import DictConfig

from gym_compose.api import GlobalConfigDictParserConfig, RunHelper, Stack
from gym_compose.api.run_helper import stack_from_global_config
from gym_compose.api.upstreams import reachable_from_containers
from gym_compose.errors import UserError

REPO = Path(__file__).resolve().parents[2]
SERVER_CONFIG = REPO / "server_images/example_single_tool_call/configs/example_single_tool_call.yaml"
TRAINING_MODEL = REPO / "configs/vllm_model/vllm_model_for_training.yaml"


def nemo_rl_config(tmp_path: Path, **extra) -> GlobalConfigDictParserConfig:
    """What NeMo RL's NemoGym._spinup passes (REFERENCE.md, "Trainers"): its keys and their kinds of values."""
    dotenv = tmp_path / "nemo_gym_env.yaml"
    dotenv.write_text("policy_model_name: from-the-dotenv-file\n")
    initial = {
        "config_paths": [str(SERVER_CONFIG), str(TRAINING_MODEL)],
        "policy_api_key": "dummy_key",
        "policy_base_url": ["http://10.1.2.3:8000/v1", "http://127.0.0.1:8001/v1"],
        "default_host": "10.1.2.9", "port_range_low": 5000, "port_range_high": 5999,
        "global_aiohttp_connector_limit_per_host": 16384, "global_aiohttp_connector_limit": 65536,
        "ray_head_node_address": "10.1.2.9:6379",
        "head_server": {"host": "0.0.0.0", "port": 15123},
        **extra,
    }
    return GlobalConfigDictParserConfig(dotenv_path=dotenv, initial_global_config_dict=DictConfig(initial),
                                        skip_load_from_cli=True)


def test_a_nemo_rl_global_config_dict_serves_the_head_where_the_trainer_asked(tmp_path):
    stack = stack_from_global_config(nemo_rl_config(tmp_path))
    plan = stack.plan
    assert (plan.options.bind_address, plan.options.head_port, plan.project) == ("0.0.0.0", 15123, "gym-compose-15123")
    assert stack.head_url == "http://10.1.2.9:15123"  # the node's IP (default_host), not the bind address
    assert plan.host_config["head_server"] == {"host": "10.1.2.9", "port": 15123}
    servers = [s for s in plan.services if s.instance]
    assert servers and all(s.published_port for s in servers)  # every server, for the trainer's processes
    for service in servers:
        spec = next(iter(plan.host_config[service.instance].values()))
        spec = next(iter(spec.values()))
        assert (spec["host"], spec["port"]) == ("10.1.2.9", service.published_port)
    model = plan.network_config["policy_model"]["responses_api_models"]["vllm_model"]
    # the list of vLLM URLs honoured; one on the trainer's loopback reaches the host from the container
    assert model["base_url"] == ["http://10.1.2.3:8000/v1", "http://host.docker.internal:8001/v1"]
    assert model["return_token_id_information"] is True
    assert model["model"] == "from-the-dotenv-file"  # the dotenv file is read; the dict wins over it


def test_the_dict_wins_over_the_dotenv_file_and_a_project_can_be_named(tmp_path):
    stack = stack_from_global_config(
        nemo_rl_config(tmp_path, policy_model_name="Qwen/Qwen3-0.6B", gym_compose_project="gc-trainer"))
    assert stack.plan.network_config["policy_model"]["responses_api_models"]["vllm_model"]["model"] == "Qwen/Qwen3-0.6B"
    assert stack.project == "gc-trainer"


def test_bad_input_is_a_clear_error_and_start_leaves_nothing(tmp_path):
    helper = RunHelper()
    with pytest.raises(UserError, match="config_paths must be a list"):
        helper.start(GlobalConfigDictParserConfig(initial_global_config_dict={"config_paths": {"a": 1}},
                                                  skip_load_from_cli=True))
    assert helper.stack is None
    with pytest.raises(RuntimeError, match="not running"):
        helper.poll()
    helper.shutdown()  # idempotent


def test_from_configs_binds_where_asked_and_names_loopback_in_the_host_view():
    stack = Stack.from_configs(resources_servers=["example_single_tool_call"], project="gc-api-unit",
                               head_port=12000, bind_address="0.0.0.0")
    assert stack.head_url == "http://127.0.0.1:12000"
    assert stack.server_url("example_single_tool_call").startswith("http://127.0.0.1:1200")
    with pytest.raises(UserError, match="not up"):
        stack.set_model_urls("policy_model", ["http://x:1/v1"])
    with pytest.raises(UserError, match="no server instance 'nope'"):
        stack.server_url("nope")
    with pytest.raises(UserError, match="head_port must be a TCP port"):
        Stack.from_configs(head_port=0)


def test_loopback_urls_become_the_hosts_name_in_containers():
    assert reachable_from_containers("http://127.0.0.1:8000/v1") == "http://host.docker.internal:8000/v1"
    assert reachable_from_containers("http://localhost/v1") == "http://host.docker.internal/v1"
    assert reachable_from_containers("http://10.0.0.5:8000/v1") == "http://10.0.0.5:8000/v1"


def test_the_cli_binds_and_advertises_where_asked_for_a_trainer_on_another_node():
    from gym_compose.cli.shared_options import _stack_options
    from gym_compose.render.compose import compose_model

    flags = _stack_options(project="gc-bind", publish=True, head_port=12100, bind="0.0.0.0",
                           advertise_host="10.0.0.5", target="compose", registry=None, node_engine=None)
    assert (flags.options.bind_address, flags.options.host_view_address) == ("0.0.0.0", "10.0.0.5")
    stack = Stack.from_configs(resources_servers=["example_single_tool_call"], project="gc-bind", head_port=12100,
                               bind_address="0.0.0.0", advertise_host="10.0.0.5")
    assert stack.head_url == "http://10.0.0.5:12100"
    model = compose_model(stack.plan, {"base": "image:tag"})
    ports = sorted(port for service in model["services"].values() for port in service.get("ports", []))
    assert ports and all(port.startswith("0.0.0.0:121") for port in ports)  # every interface
    assert stack.plan.host_config["example_single_tool_call"]["resources_servers"]["example_single_tool_call"][
        "host"] == "10.0.0.5"
    with pytest.raises(UserError, match="--bind must be an IP address"):
        _stack_options(project="gc-bind", publish=True, head_port=12100, bind="everywhere", advertise_host=None,
                       target="compose", registry=None, node_engine=None)
