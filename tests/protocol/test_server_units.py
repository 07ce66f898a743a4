"""Pure pieces of the server runtime: config context, secrets, chat conversion, mock planning."""

from __future__ import annotations

import httpx
import pytest
import yaml

from gym_compose.server.context import ServerConfigError, load_context
from gym_compose.server.models.chat_conversion import chat_to_response, responses_to_chat
from gym_compose.server.models.mock_model import arguments_from_schema, plan_turn, wrong_answer
from tests.support.stacks import seed_verify_stack

CONFIG = {"head_server": {"host": "h", "port": 11000},
          "m": {"responses_api_models": {"openai_model": {"host": "m", "port": 8000, "openai_api_key": "secret://key"}}}}


def test_context_finds_its_block_and_fills_secrets(tmp_path):
    (tmp_path / "key").write_text("sk-123\n")
    context = load_context({"NEMO_GYM_CONFIG_DICT": yaml.safe_dump(CONFIG), "NEMO_GYM_CONFIG_PATH": "m",
                            "GYM_COMPOSE_SECRETS_DIR": str(tmp_path), "GYM_COMPOSE_BIND_HOST": "0.0.0.0"})
    assert (context.server_type, context.implementation, context.port) == ("responses_api_models", "openai_model", 8000)
    assert context.spec["openai_api_key"] == "sk-123" and context.bind_host == "0.0.0.0"


def test_context_errors_name_the_problem(tmp_path):
    env = {"NEMO_GYM_CONFIG_DICT": yaml.safe_dump(CONFIG), "GYM_COMPOSE_SECRETS_DIR": str(tmp_path)}
    with pytest.raises(ServerConfigError, match="'key' is not a file"):
        load_context({**env, "NEMO_GYM_CONFIG_PATH": "m"})
    with pytest.raises(ServerConfigError, match="names no instance"):
        load_context({**env, "NEMO_GYM_CONFIG_PATH": "nope"})


def test_chat_conversion_round_trip_keeps_tools_calls_and_reasoning():
    params = {"input": [{"role": "user", "content": "hi"},
                        {"type": "reasoning", "id": "r", "summary": [{"type": "summary_text", "text": "think"}]},
                        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                        {"type": "function_call_output", "call_id": "c1", "output": "42"}],
              "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}], "temperature": 0.1}
    chat = responses_to_chat(params, "m")
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant", "tool"]
    assert chat["messages"][1]["tool_calls"][0]["id"] == "c1" and chat["messages"][1]["reasoning_content"] == "think"
    assert chat["tools"][0]["function"]["name"] == "f" and chat["temperature"] == 0.1
    completion = {"id": "x", "choices": [{"message": {"role": "assistant", "content": "ok", "reasoning_content": "r",
                  "tool_calls": [{"id": "c2", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
                  "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}
    response = chat_to_response(completion, params)
    assert [item["type"] for item in response["output"]] == ["reasoning", "message", "function_call"]
    assert response["usage"]["total_tokens"] == 7


def test_mock_model_plans():
    schema = {"properties": {"city": {"type": "string"}, "n": {"type": "integer", "minimum": 2},
                             "unit": {"type": "string", "enum": ["C", "F"]}}}
    assert arguments_from_schema(schema, {"city": "Oslo"}) == {"city": "Oslo", "n": 2, "unit": "C"}
    tools = [{"type": "function", "name": "f", "parameters": schema}]
    assert plan_turn(0, tools, "auto", {}, {}, "oracle").calls[0][0] == "f"
    assert plan_turn(1, tools, "auto", {}, {"expected_answer": 7}, "oracle").text == "7"
    assert plan_turn(1, tools, "auto", {}, {"expected_answer": 7}, "adversary").text == wrong_answer(7) == "8"
    assert plan_turn(0, tools, "none", {}, {}, "plain").calls == []


@pytest.mark.protocol
def test_upstream_model_error_fails_the_rollout_with_the_reason(start_stack):
    from conftest import SERVER_IMAGES

    config = seed_verify_stack("example_single_tool_call", proxied=True)
    del config["mock_upstream"]
    # nothing listens on port 9 of loopback: connection refused on every attempt
    config["policy_model"]["responses_api_models"]["openai_model"]["openai_base_url"] = "http://127.0.0.1:9/v1"
    config["model_endpoint_readiness_timeout_seconds"] = 0
    stack = start_stack(config, {"example_single_tool_call": SERVER_IMAGES / "example_single_tool_call"})
    answer = httpx.post(f"{stack.url('environment')}/run", json={"responses_create_params": {"input": "hi"}}, timeout=30)
    assert answer.status_code == 500
    assert "upstream model endpoint http://127.0.0.1:9/v1/responses failed: cannot connect" in answer.text
    assert httpx.get(f"{stack.url('policy_model')}/", timeout=5).status_code == 200


def test_invalid_server_config_names_the_field_and_never_quotes_a_secret():
    from gym_compose.server.context import ServerContext
    from gym_compose.server.models.openai_model import OpenAIModel
    from gym_compose.server.runtime import build_server

    spec = {"openai_api_key": "sk-live-SECRET", "request_timeout_seconds": "soon"}  # no openai_base_url
    context = ServerContext(name="policy_model", server_type="responses_api_models", implementation="openai_model",
                            spec=spec, global_config={}, bind_host="127.0.0.1", port=8000)
    with pytest.raises(ServerConfigError) as caught:
        build_server(OpenAIModel, context)
    message = str(caught.value)
    assert "openai_base_url: Field required" in message and "request_timeout_seconds" in message
    assert "sk-" not in message and "SECRET" not in message and caught.value.__cause__ is None


def test_readiness_resolves_upstream_hosts_off_the_event_loop(monkeypatch):
    import asyncio
    import socket
    import time

    from gym_compose.server.readiness import Readiness

    def slow_dns(*args, **kwargs):
        time.sleep(0.5)
        raise socket.gaierror("no such host")

    monkeypatch.setattr(socket, "getaddrinfo", slow_dns)

    async def probe_while_ticking() -> tuple[int, Readiness]:
        readiness = Readiness({"openai_base_url": "http://no-such-host.invalid/v1"}, {})
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        ticker = asyncio.get_running_loop().create_task(tick())
        await asyncio.wait_for(readiness._probe_all(), 5)
        ticker.cancel()
        return ticks, readiness

    ticks, readiness = asyncio.run(probe_while_ticking())
    assert readiness.ready and not readiness.pending
    assert ticks >= 10  # the loop kept running during the 0.5 s lookup


class _Exited(Exception):
    pass


def _record_exit(monkeypatch) -> list[int]:
    from gym_compose.server import readiness

    codes: list[int] = []

    def fake_exit(code: int) -> None:
        codes.append(code)
        raise _Exited

    monkeypatch.setattr(readiness.os, "_exit", fake_exit)
    return codes


@pytest.mark.parametrize("url", ["http://[bad/v1", "http://127.0.0.1:99999999/v1"])
def test_readiness_probe_that_cannot_run_logs_the_endpoint_and_exits_1(monkeypatch, capsys, url):
    import asyncio

    from gym_compose.server.readiness import Readiness

    codes = _record_exit(monkeypatch)
    readiness = Readiness({"openai_base_url": url}, {})

    async def probe() -> None:
        await asyncio.wait_for(readiness._probe_all(), 10)

    with pytest.raises(_Exited):
        asyncio.run(probe())
    assert codes == [1] and not readiness.ready
    error = capsys.readouterr().err
    assert url in error and "failed" in error


def test_head_readiness_probe_that_cannot_run_names_the_server_and_exits_1(monkeypatch, capsys):
    import asyncio

    from gym_compose.server.readiness import PeersReadiness

    codes = _record_exit(monkeypatch)
    readiness = PeersReadiness({"head_server": {"host": "h", "port": 1},
                                "model": {"responses_api_models": {"mock_model": {"host": "127.0.0.1", "port": 99999999}}}})

    async def poll() -> None:
        await asyncio.wait_for(readiness._poll(), 10)

    with pytest.raises(_Exited):
        asyncio.run(poll())
    assert codes == [1] and not readiness.ready
    error = capsys.readouterr().err
    assert "server model at http://127.0.0.1:99999999" in error


def test_the_local_target_closes_its_log_files_when_stopped(tmp_path, monkeypatch):
    from gym_compose.engine.targets import local_processes
    from tests.support.stacks import mock_model

    opened = []
    real_open = open

    def tracking_open(*args, **kwargs):
        handle = real_open(*args, **kwargs)
        opened.append(handle)
        return handle

    monkeypatch.setattr(local_processes, "open", tracking_open, raising=False)
    stack = local_processes.LocalProcesses(local_processes.with_local_addresses({"policy_model": mock_model()}),
                                           log_dir=tmp_path)
    stack.start(timeout=30)
    stack.stop()
    assert len(opened) == 2 and all(handle.closed for handle in opened)
