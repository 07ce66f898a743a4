"""The local-process target's renderer: what it makes of a plan, and what it refuses."""

from pathlib import Path

import pytest

from gym_compose.config import ConfigRequest, load
from gym_compose.contract import HEAD_INSTANCE
from gym_compose.engine.targets.local_processes import LocalProcesses
from gym_compose.errors import UserError
from gym_compose.plan.planner import plan_stack

REPO = Path(__file__).resolve().parents[2]


def planned(tmp_path: Path, **request):
    loaded = load(ConfigRequest(**request), cwd=tmp_path)
    return plan_stack(loaded.data, loaded.search_roots)


def test_a_plan_becomes_local_addresses_code_folders_and_secret_files(tmp_path):
    stack = planned(tmp_path, resources_servers=["example_single_tool_call"], model_types=["openai_model"],
                    model_url="https://api.example.com/v1", model_name="m", model_api_key="sk-local")
    deployed = LocalProcesses.for_stack(stack, tmp_path / "logs")
    assert set(deployed.services) == {s.name for s in stack.services}  # the plan's service names
    assert deployed.services["head"] == HEAD_INSTANCE
    ports = {deployed.port(service) for service in deployed.services}
    assert len(ports) == len(deployed.services)  # one free port each, on 127.0.0.1
    assert deployed.url("example-single-tool-call").startswith("http://127.0.0.1:")
    assert deployed.server_dirs == {"example_single_tool_call": REPO / "server_images/example_single_tool_call"}
    (secret,) = stack.secrets  # the key travels as a file the runtime reads, as under compose
    assert (deployed.secrets_dir / secret).read_text() == "sk-local"
    assert deployed.processes == {}  # nothing runs before up


def test_sandboxes_and_engine_images_are_refused_naming_them(tmp_path):
    with pytest.raises(UserError, match="runs no sandboxes, which python_sandbox lease"):
        LocalProcesses.for_stack(planned(tmp_path, resources_servers=["python_sandbox"]), tmp_path / "a")
    engine = planned(tmp_path, resources_servers=["example_single_tool_call"], model_types=["local_vllm_model"],
                     overrides=["++policy_model_name=Qwen/Qwen3-0.6B"])
    with pytest.raises(UserError, match="runs no inference engine images: policy-model-vllm"):
        LocalProcesses.for_stack(engine, tmp_path / "b")
