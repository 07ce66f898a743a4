"""The mock model's token ids for RL training: on the Responses API itself, and as vllm_model's
Chat Completions upstream, each turn's prompt plus generation starts the next turn's prompt."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import uvicorn
from starlette.testclient import TestClient

from gym_compose.server.context import ServerContext
from gym_compose.server.models.mock_model import MockModel, MockModelConfig
from gym_compose.server.models.mock_tokens import LOG_PROB, TOKEN_FIELDS
from gym_compose.server.models.vllm_model import VLLMModel, VLLMModelConfig
from gym_compose.server.runtime import finish_app

pytestmark = pytest.mark.protocol
TOOL = {"type": "function", "name": "get_weather", "description": "weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
FIRST_INPUT = [{"role": "user", "content": "What is the weather in Paris?"}]


def app_of(server, name: str, implementation: str):
    context = ServerContext(name=name, server_type="responses_api_models", implementation=implementation,
                            spec={}, global_config={}, bind_host="127.0.0.1", port=0)
    return finish_app(server.setup_webserver(), context, server)


def mock(**config) -> MockModel:
    return MockModel(config=MockModelConfig(name="judge_model", **config))


def episode(client: TestClient) -> list[dict]:
    """Two turns the way NeMo Gym's simple_agent runs them: the tool call, then its result appended."""
    first = client.post("/v1/responses", json={"input": FIRST_INPUT, "tools": [TOOL]})
    assert first.status_code == 200, first.text
    call = first.json()["output"][-1]
    assert call["type"] == "function_call"
    history = [*FIRST_INPUT, *first.json()["output"],
               {"type": "function_call_output", "call_id": call["call_id"], "output": '{"sky": "clear"}'}]
    second = client.post("/v1/responses", json={"input": history, "tools": [TOOL]})
    assert second.status_code == 200, second.text
    return [first.json(), second.json()]


def assert_contiguous(turns: list[dict]) -> None:
    so_far: list[int] = []
    for turn in turns:
        *earlier, last = turn["output"]
        assert all(not set(TOKEN_FIELDS) & item.keys() for item in earlier)  # on the last item alone
        prompt, generation = last["prompt_token_ids"], last["generation_token_ids"]
        assert prompt[:len(so_far)] == so_far, "the history was rewritten between turns"
        assert generation and last["generation_log_probs"] == [LOG_PROB] * len(generation)
        so_far = prompt + generation


def test_the_mock_reports_contiguous_token_ids_when_asked():
    with TestClient(app_of(mock(return_token_id_information=True), "judge_model", "mock_model")) as client:
        turns = episode(client)
        assert_contiguous(turns)
        assert turns[1]["output"][-1]["type"] == "message"
        tokenized = client.post("/tokenize", json={"input": FIRST_INPUT}).json()
        assert tokenized["tokens"] == turns[0]["output"][-1]["prompt_token_ids"]


def test_without_the_switch_the_mock_answers_as_before():
    with TestClient(app_of(mock(), "judge_model", "mock_model")) as client:
        for turn in episode(client):
            assert all(not set(TOKEN_FIELDS) & item.keys() for item in turn["output"])


@pytest.fixture(params=[False, True], ids=["plain-vllm", "training-vllm"])
def mock_upstream(request):
    """The mock served over real HTTP: vllm_model's upstream client calls it as it calls vLLM; in
    training mode it also puts the bundle on the message, as NeMo RL's vLLM does."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    upstream = mock(return_token_id_information=request.param)
    server = uvicorn.Server(uvicorn.Config(app_of(upstream, "vllm", "mock_model"), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the mock did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.mark.parametrize("inline", [False, True], ids=["logprobs-and-tokenize", "inline-ids"])
def test_vllm_model_for_training_on_the_mock_gets_contiguous_token_ids(mock_upstream, inline):
    config = VLLMModelConfig(name="policy_model", base_url=mock_upstream, api_key="EMPTY", model="mock",
                             return_token_id_information=True, request_prompt_and_generation_token_ids=inline)
    with TestClient(app_of(VLLMModel(config=config), "policy_model", "vllm_model")) as client:
        assert_contiguous(episode(client))
