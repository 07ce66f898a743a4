"""The sandbox API's NeMo Gym surface: import names, provider references, value types; and the
mock model's oracle answering from its tool's output."""

from __future__ import annotations

import importlib

import pytest

import gym_compose.sandbox as sandbox_api
from gym_compose.sandbox import client as sandbox_client
from gym_compose.sandbox.client import BrokerProvider
from gym_compose.server import compat
from gym_compose.server.models.mock_model import plan_turn, tool_answer


def test_nemo_gym_sandbox_names_are_gym_composes():
    compat.install()
    nemo_sandbox = importlib.import_module("nemo_gym.sandbox")
    for name in ("AsyncSandbox", "Sandbox", "SandboxSpec", "SandboxResources", "SandboxExecResult", "ExecResult",
                 "SandboxStatus", "create_provider", "resolve_provider_config", "resolve_provider_metadata"):
        assert getattr(nemo_sandbox, name) is getattr(sandbox_api, name), name
    assert importlib.import_module("nemo_gym.sandbox.config").resolve_provider_config is \
        sandbox_api.resolve_provider_config
    assert importlib.import_module("nemo_gym.sandbox.providers").SandboxSpec is sandbox_api.SandboxSpec
    assert importlib.import_module("nemo_gym.sandbox.utils").cpu_cap_env(2.7)["OMP_NUM_THREADS"] == "2"
    access = importlib.import_module("nemo_gym.sandbox.access")
    assert access.SandboxAccess(connection={"provider_config_ref": "sandbox", "descriptor": {}}, workdir="/w")
    assert callable(importlib.import_module("nemo_gym.global_config").get_global_config_dict)


def test_provider_references_resolve_like_nemo_gym():
    config = {"sandbox": {"docker": {"create": {}}, "default_metadata": {"team": "a"}},
              "box2": {"opensandbox": {}}, "other": 3}
    assert sandbox_api.resolve_provider_config("sandbox", config) == {"docker": {"create": {}}}
    assert sandbox_api.resolve_provider_metadata("sandbox", config) == {"team": "a"}
    assert sandbox_api.resolve_provider_config({"e2b": {"x": 1}}) == {"e2b": {"x": 1}}
    with pytest.raises(ValueError, match=r"'missing' is not defined.*'box2', 'sandbox'"):
        sandbox_api.resolve_provider_config("missing", config)
    with pytest.raises(ValueError, match="exactly one provider key"):
        sandbox_api.resolve_provider_config({"a": {}, "b": {}})
    with pytest.raises(TypeError):
        sandbox_api.resolve_provider_config(7)


def test_every_provider_name_becomes_the_broker_unless_registered(capsys):
    sandbox_client._noticed.clear()
    assert isinstance(sandbox_api.create_provider({"gym_compose": {}}), BrokerProvider)
    assert capsys.readouterr().err == ""
    assert isinstance(sandbox_api.create_provider({"daytona": {"api_key": "x"}}), BrokerProvider)
    assert "sandbox provider 'daytona' runs as gym-compose sandboxes" in capsys.readouterr().err

    class OwnProvider:
        def __init__(self, **settings):
            self.settings = settings

    sandbox_api.register_provider("own", OwnProvider)
    try:
        provider = sandbox_api.create_provider({"own": {"a": 1}})
        assert isinstance(provider, OwnProvider) and provider.settings == {"a": 1}
    finally:
        sandbox_client._registered.pop("own")


def test_spec_and_resources_types():
    spec = sandbox_api.SandboxSpec(resources={"cpu": 2, "memory_mib": "512"}, ports=["80"])
    assert spec.resources == sandbox_api.SandboxResources(cpu=2.0, memory_mib=512) and spec.ports == (80,)
    with pytest.raises(ValueError, match="unknown sandbox resource keys: gpus"):
        sandbox_api.SandboxSpec(resources={"gpus": 1})
    with pytest.raises(ValueError, match="invalid sandbox TCP port"):
        sandbox_api.SandboxSpec(ports=[70000])
    result = sandbox_api.ExecResult(stdout="", stderr="", return_code=0)
    assert result.error_type is None and result.reason is None


def test_mock_oracle_answers_from_the_tool_output_when_the_row_asks():
    tools = [{"type": "function", "name": "run_python", "parameters": {"properties": {"code": {"type": "string"}}}}]
    metadata = {"gym_mock_answer": "tool_output"}
    task = {"code": "print(6 * 7)", "expected_answer": "42"}
    first = plan_turn(0, tools, "auto", metadata, task, "oracle")
    assert first.calls == [("run_python", {"code": "print(6 * 7)"})]
    tool_output = '{"return_code": 0, "stdout": "41\\n", "stderr": ""}'
    assert plan_turn(1, tools, "auto", metadata, task, "oracle", tool_output).text == "41"
    assert plan_turn(1, tools, "auto", metadata, task, "adversary", tool_output).text == "43"
    assert plan_turn(1, tools, "auto", {}, task, "oracle", tool_output).text == "42"
    assert tool_answer("plain text\n") == "plain text" and tool_answer('{"result": 3}') == '{"result": 3}'
