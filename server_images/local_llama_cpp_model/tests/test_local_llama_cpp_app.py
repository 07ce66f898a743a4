"""local_llama_cpp_model: message flattening, tool-call parsing, readiness, and what goes to and
comes back from llama.cpp's server, with a stand-in for xllamacpp (the real model runs in
tests/e2e/test_local_model.py)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
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


class FakeLlamaServer:
    """xllamacpp.Server as far as the app uses it: answers from a list, records the requests."""

    def __init__(self, params, answers: list) -> None:
        self.params, self.answers, self.requests = params, answers, []

    def handle_chat_completions(self, request: dict) -> dict:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def fake_xllamacpp(monkeypatch):
    """A stand-in xllamacpp module; `.answers` are what its server's requests get, in order."""
    module = types.ModuleType("xllamacpp")
    module.answers = []
    module.servers = []

    class Params(types.SimpleNamespace):
        def __init__(self) -> None:
            super().__init__(model=types.SimpleNamespace(path=""), sampling=types.SimpleNamespace(seed=0xFFFFFFFF),
                             cpuparams=types.SimpleNamespace(n_threads=0),
                             cpuparams_batch=types.SimpleNamespace(n_threads=0), use_jinja=True, chat_template="")

    def server(params):
        module.servers.append(FakeLlamaServer(params, module.answers))
        return module.servers[-1]

    module.CommonParams, module.Server = Params, server
    monkeypatch.setitem(sys.modules, "xllamacpp", module)
    return module


def chat_answer(text: str) -> dict:
    return {"object": "chat.completion", "model": "/models/x.gguf", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}


def test_the_config_reaches_llama_cpp_and_a_template_it_lacks_stops_the_load(fake_xllamacpp, tmp_path):
    config = app.LocalLlamaCppModelConfig(name="policy_model", model_path=str(tmp_path / "m.gguf"), n_ctx=1024,
                                          n_batch=64, seed=7, chat_format="gemma")
    fake_xllamacpp.answers.append(chat_answer("x"))
    server = app.start_llama_server(config, tmp_path / "m.gguf", threads=3)
    params = server.params
    assert (params.model.path, params.n_ctx, params.n_batch, params.n_parallel) == (
        str(tmp_path / "m.gguf"), 1024, 64, 1)
    assert (params.cpuparams.n_threads, params.cpuparams_batch.n_threads, params.sampling.seed) == (3, 3, 7)
    assert (params.use_jinja, params.chat_template) == (False, "gemma")  # a built-in template, by name
    assert server.requests == [{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}]

    fake_xllamacpp.answers.append(RuntimeError("this custom template is not supported, try using --jinja"))
    with pytest.raises(ValueError, match="chat_format 'gemmma': this custom template is not supported"):
        app.start_llama_server(config.model_copy(update={"chat_format": "gemmma"}), tmp_path / "m.gguf", threads=1)
    fake_xllamacpp.answers.append(chat_answer("x"))
    plain = app.start_llama_server(config.model_copy(update={"chat_format": None, "seed": -1}), tmp_path / "m.gguf", 1)
    assert (plain.params.use_jinja, plain.params.chat_template, plain.params.sampling.seed) == (True, "", 0xFFFFFFFF)


def test_answers_errors_and_context_overflow_from_llama_cpp(fake_xllamacpp, tmp_path):
    model = app.LocalLlamaCppModel(config=app.LocalLlamaCppModelConfig(
        name="policy_model", model_path=str(tmp_path / "m.gguf"), model="tiny", max_output_tokens=9))
    fake_xllamacpp.answers.extend([
        chat_answer('{"name": "get_weather", "arguments": {"city": "Oslo"}}'),
        {"error": {"code": 400, "message": "request (409 tokens) exceeds the available context size (256 tokens)",
                   "type": "exceed_context_size_error"}},
        {"error": {"code": 400, "message": "failed to parse grammar", "type": "invalid_request_error"}},
        RuntimeError("the main loop stopped"),
    ])
    model._llama = fake_xllamacpp.Server(fake_xllamacpp.CommonParams())
    context = ServerContext(name="policy_model", server_type="responses_api_models",
                            implementation="local_llama_cpp_model", spec={}, global_config={},
                            bind_host="127.0.0.1", port=0)
    client = TestClient(finish_app(model.setup_webserver(), context, model))
    request = {"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": [TOOL], "temperature": 0.5,
               "stream_options": {"ignored": True}}

    called = client.post("/v1/chat/completions", json=request).json()
    sent = fake_xllamacpp.servers[-1].requests[-1]
    assert (sent["temperature"], sent["max_tokens"]) == (0.5, 9)
    assert "tools" not in sent and "stream_options" not in sent
    assert "get_weather" in sent["messages"][0]["content"]  # the tools described in the system turn
    assert called["model"] == "tiny" and called["choices"][0]["finish_reason"] == "tool_calls"
    assert json.loads(called["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) == {"city": "Oslo"}

    overflow = client.post("/v1/chat/completions", json=request).json()
    assert overflow["choices"][0]["finish_reason"] == "length" and overflow["choices"][0]["message"]["content"] == ""
    refused = client.post("/v1/chat/completions", json=request)
    assert refused.status_code == 400 and refused.json()["error"] == "failed to parse grammar"
    failed = client.post("/v1/chat/completions", json=request)
    assert failed.status_code == 500 and failed.json()["error"] == "the main loop stopped"
