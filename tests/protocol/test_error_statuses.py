"""Bad input and bad upstream answers get 422 / 502 with the reason, never a 500."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.requests import Request
from starlette.testclient import TestClient

from gym_compose.server.models.mock_model import MockModel, MockModelConfig
from gym_compose.server.models.openai_model import OpenAIModel, OpenAIModelConfig
from gym_compose.server.models.upstream import UpstreamClient, _Answer
from gym_compose.server.resources import BaseResourcesServerConfig, SimpleResourcesServer
from tests.support.apps import client_for


def test_close_session_with_a_body_that_is_not_json_is_a_422():
    server = SimpleResourcesServer(config=BaseResourcesServerConfig(name="res"))
    with client_for(server, "resources_servers", "res") as client:
        assert client.post("/close_session", content=b"{not json").status_code == 422
        assert client.post("/close_session", content=b"[1, 2]").status_code == 422
        assert client.post("/close_session", content=b"").status_code == 200
        assert client.post("/close_session", json={}).status_code == 200


def test_aggregate_metrics_refuses_a_body_without_a_list_of_rows_and_answers_one_with_the_servers_hook():
    class Counting(SimpleResourcesServer):
        async def aggregate_metrics(self, body):
            return {"agent_metrics": {"rows": len(body.verify_responses)}, "key_metrics": {}}

    server = Counting(config=BaseResourcesServerConfig(name="res"))
    with client_for(server, "resources_servers", "res") as client:
        for bad in (b"{not json", b"[1]", b'{"verify_responses": 3}', b'{"verify_responses": [1, {}]}', b"{}"):
            answer = client.post("/aggregate_metrics", content=bad)
            assert answer.status_code == 422, (bad, answer.text)
        rows = {"verify_responses": [{"reward": 1.0}, {"reward": 0.0}]}
        assert client.post("/aggregate_metrics", json=rows).json()["agent_metrics"] == {"rows": 2}


def proxy(monkeypatch, api_mode: str, status: int, raw: bytes) -> TestClient:
    async def attempt(self, target, payload, headers, deadline):
        return _Answer(status, {}, raw)

    monkeypatch.setattr(UpstreamClient, "_attempt", attempt)
    server = OpenAIModel(config=OpenAIModelConfig(name="policy_model", openai_base_url="http://upstream:8000/v1",
                                                  api_mode=api_mode))
    return client_for(server, "responses_api_models", "openai_model")


@pytest.mark.parametrize("api_mode", ["responses", "chat_completions"])
@pytest.mark.parametrize("raw", [b"<html>gateway says hi</html>", b"[1, 2]"])
def test_an_upstream_200_that_is_not_a_json_object_is_a_502(monkeypatch, api_mode, raw):
    with proxy(monkeypatch, api_mode, 200, raw) as client:
        answer = client.post("/v1/responses", json={"input": "hi"})
        assert answer.status_code == 502, answer.text
        assert answer.json()["type"] == "upstream_error" and "HTTP 200" in answer.json()["error"]
        chat = client.post("/v1/chat/completions", json={"messages": []})
        assert chat.status_code == 502, chat.text


@pytest.mark.parametrize("completion", [{"choices": []}, {"choices": ["not an object"]}, {"id": "x"}])
def test_a_chat_completion_without_a_usable_choice_is_a_502(monkeypatch, completion):
    with proxy(monkeypatch, "chat_completions", 200, json.dumps(completion).encode()) as client:
        answer = client.post("/v1/responses", json={"input": "hi"})
    assert answer.status_code == 502, answer.text
    assert answer.json()["type"] == "upstream_error" and "cannot be read" in answer.json()["error"]


def test_input_a_chat_endpoint_cannot_take_is_a_502_naming_the_item(monkeypatch):
    with proxy(monkeypatch, "chat_completions", 200, b'{"choices": [{"message": {"content": "ok"}}]}') as client:
        answer = client.post("/v1/responses", json={"input": [{"type": "web_search_call", "id": "w"}]})
        assert answer.status_code == 502, answer.text
        assert "web_search_call" in answer.json()["error"]
        ok = client.post("/v1/responses", json={"input": "hi"})
        assert ok.status_code == 200 and ok.json()["output"][0]["content"][0]["text"] == "ok"


@pytest.mark.parametrize("metadata, field", [
    ({"gym_mock_script": "[{not json"}, "gym_mock_script"),
    ({"gym_mock_script": '{"text": "a"}'}, "gym_mock_script"),
    ({"gym_mock_script": '["just a string"]'}, "gym_mock_script"),
    ({"gym_mock_script": '[{"arguments": {}}]'}, "gym_mock_script"),
    ({"gym_mock_script": '[{"tool": "f", "arguments": [1]}]'}, "gym_mock_script"),
    ({"gym_mock_script": '[{"tool_calls": "f"}]'}, "gym_mock_script"),
    ({"gym_mock_mode": "genius"}, "gym_mock_mode"),
])
def test_mock_model_refuses_malformed_mock_instructions_with_a_422(metadata, field):
    server = MockModel(config=MockModelConfig(name="policy_model"))
    with client_for(server, "responses_api_models", "mock_model") as client:
        for path, body in (("/v1/responses", {"input": "hi"}), ("/v1/chat/completions", {"messages": []})):
            answer = client.post(path, json={**body, "metadata": metadata})
            assert answer.status_code == 422, (path, answer.text)
            assert answer.json()["detail"][0]["loc"] == ["body", "metadata", field]
        good = client.post("/v1/responses", json={"input": "hi", "metadata": {
            "gym_mock_script": '[{"tool": "f", "arguments": {"a": 1}}]'}})
        assert good.status_code == 200 and good.json()["output"][0]["name"] == "f"


def test_every_server_answers_an_uncaught_error_with_one_500_shape():
    from fastapi import FastAPI
    from starlette.applications import Starlette
    from starlette.routing import Route

    from gym_compose.net.web import BadRequestBody
    from gym_compose.server.base import BaseServer, BaseServerConfig

    async def explode(request: Request):
        raise RuntimeError("tool blew up")

    async def bad_body(request: Request):
        raise BadRequestBody("request body is not valid JSON")

    class FastAPIServer(BaseServer):
        def setup_webserver(self):
            app = FastAPI()
            app.post("/explode")(explode)
            app.post("/bad")(bad_body)
            return app

    class StarletteServer(BaseServer):
        def setup_webserver(self):
            return Starlette(routes=[Route("/explode", explode, methods=["POST"]), Route("/bad", bad_body, methods=["POST"])])

    answers = {}
    for cls in (FastAPIServer, StarletteServer):
        with client_for(cls(config=BaseServerConfig(name="tools")), "resources_servers", "tools") as client:
            answers[cls.__name__] = client.post("/explode", json={}), client.post("/bad", json={})
    for exploded, bad in answers.values():
        assert exploded.status_code == 500
        assert exploded.json() == {"error": "tool blew up", "type": "RuntimeError", "server": "tools", "path": "/explode"}
        assert bad.status_code == 422
        assert bad.json() == {"detail": [{"loc": ["body"], "msg": "request body is not valid JSON", "type": "json_invalid"}]}



def test_mock_model_with_a_required_key_refuses_calls_without_it():
    server = MockModel(config=MockModelConfig(name="mock", host="127.0.0.1", port=0, required_api_key="sk-right"))
    with client_for(server, "responses_api_models", "mock_model") as client:
        assert client.get("/v1/models").status_code == 401
        assert client.get("/v1/models", headers={"Authorization": "Bearer sk-wrong"}).status_code == 401
        assert client.get("/v1/models", headers={"Authorization": "Bearer sk-right"}).status_code == 200


def test_mock_model_latency_delays_each_generation_call_within_its_range(monkeypatch):
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded(seconds, *args, **kwargs):
        waits.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr("gym_compose.server.models.mock_model.asyncio.sleep", recorded)
    server = MockModel(config=MockModelConfig(name="mock", host="127.0.0.1", port=0, latency_s=0.2, latency_max_s=2.0))
    with client_for(server, "responses_api_models", "mock_model") as client:
        body = {"input": [{"role": "user", "content": "hi"}]}
        for _ in range(20):
            assert client.post("/v1/responses", json=body).status_code == 200
        assert client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}).status_code == 200
        assert client.get("/v1/models").status_code == 200  # not a generation call: no delay
    assert len(waits) == 21 and all(0.2 <= w <= 2.0 for w in waits) and len(set(waits)) > 1
