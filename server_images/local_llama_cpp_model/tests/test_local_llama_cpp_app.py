"""local_llama_cpp_model: message flattening, tool-call parsing and readiness, without llama.cpp
(the real model runs in tests/e2e/test_local_model.py)."""

from __future__ import annotations

import json
from pathlib import Path

from starlette.testclient import TestClient

from gym_compose.server.context import ServerContext
from gym_compose.server.runtime import finish_app
from gym_compose.server.testing import load_app

HERE = Path(__file__).resolve().parents[1]
app = load_app(HERE)
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def test_tool_turns_become_alternating_user_and_assistant_turns():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"weather": "sunny"}'},
        {"role": "user", "content": "Thanks."},
    ]
    flat = app.plain_messages(messages, [TOOL])
    assert [m["role"] for m in flat] == ["system", "user", "assistant", "user"]
    assert flat[0]["content"].startswith("Be brief.") and "get_weather" in flat[0]["content"]
    assert json.loads(flat[2]["content"]) == {"name": "get_weather", "arguments": {"city": "Oslo"}}
    assert flat[3]["content"] == 'Tool result: {"weather": "sunny"}\n\nThanks.'


def test_without_a_system_role_the_system_text_opens_the_first_user_turn():
    flat = app.plain_messages([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], [],
                              system_role=False)
    assert flat == [{"role": "user", "content": "Be brief.\n\nHi"}]


def test_answers_that_call_an_offered_tool_become_calls_and_others_stay_text():
    names = {"get_weather"}
    assert app.parse_tool_call('{"name": "get_weather", "arguments": {"city": "Oslo"}}', names) == (
        "get_weather", {"city": "Oslo"})
    assert app.parse_tool_call('```json\n{"name": "get_weather", "parameters": {"city": "Rome"}}\n```', names) == (
        "get_weather", {"city": "Rome"})
    assert app.parse_tool_call('```tool_code\nget_weather(city="Paris")\n```', names) == ("get_weather", {"city": "Paris"})
    assert app.parse_tool_call('{"name": "launch_rocket", "arguments": {}}', names) is None
    assert app.parse_tool_call("It is sunny in Oslo.", names) is None


def test_not_ready_until_the_model_has_loaded_and_a_missing_file_is_named(tmp_path):
    server = app.LocalLlamaCppModel(config=app.LocalLlamaCppModelConfig(
        name="policy_model", model_path=str(tmp_path / "missing.gguf")))
    context = ServerContext(name="policy_model", server_type="responses_api_models",
                            implementation="local_llama_cpp_model", spec={}, global_config={},
                            bind_host="127.0.0.1", port=0)
    client = TestClient(finish_app(server.setup_webserver(), context, server))
    ready = client.get("/_gym_compose/ready")
    assert ready.status_code == 503 and ready.json()["reason"] == f"loading model {tmp_path / 'missing.gguf'}"
    busy = client.post("/v1/responses", json={"input": "hi"})
    assert busy.status_code == 503 and "still loading" in busy.json()["error"]
    assert client.get("/v1/models").json()["data"][0]["id"] == "missing"
