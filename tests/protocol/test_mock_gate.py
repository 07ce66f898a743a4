"""The mock model's call gate (mock_gate.py): the hold that lets a test land a fault mid-run."""

from __future__ import annotations

import threading
import time

import pytest

from gym_compose.server.models.mock_gate import GATE_PATH
from gym_compose.server.models.mock_model import MockModel, MockModelConfig
from tests.support.apps import client_for

pytestmark = pytest.mark.protocol
BODY = {"input": [{"role": "user", "content": "hi"}]}


def gated_client(hold_after_calls: int | None):
    server = MockModel(config=MockModelConfig(name="mock", host="127.0.0.1", port=0, hold_after_calls=hold_after_calls))
    return client_for(server, "responses_api_models", "mock_model")


def held_call(client, path: str = "/v1/responses", body: dict = BODY) -> tuple[threading.Thread, list[int]]:
    statuses: list[int] = []
    thread = threading.Thread(target=lambda: statuses.append(client.post(path, json=body).status_code), daemon=True)
    thread.start()
    return thread, statuses


def wait_until_held(client, count: int) -> None:
    deadline = time.monotonic() + 30
    while client.get(GATE_PATH).json()["held"] != count:
        assert time.monotonic() < deadline, f"never {count} calls held: {client.get(GATE_PATH).json()}"
        time.sleep(0.01)


def test_calls_past_the_budget_wait_until_the_gate_lets_them_go():
    with gated_client(2) as client:
        assert [client.post("/v1/responses", json=BODY).status_code for _ in range(2)] == [200, 200]
        assert client.get(GATE_PATH).json() == {"held": 0, "passes_left": 0}
        first, first_status = held_call(client)
        chat = {"messages": [{"role": "user", "content": "hi"}]}
        second, second_status = held_call(client, "/v1/chat/completions", chat)
        wait_until_held(client, 2)
        assert client.get("/v1/models").status_code == 200  # not a generation call: never held
        assert first.is_alive() and second.is_alive()

        assert client.post(GATE_PATH, json={"passes": 1}).json() == {"held": 0, "passes_left": 1}
        first.join(30)
        second.join(30)
        assert first_status == second_status == [200]  # the held calls went, without spending the pass
        assert client.post("/v1/responses", json=BODY).status_code == 200  # the one pass
        third, third_status = held_call(client)
        wait_until_held(client, 1)

        assert client.post(GATE_PATH, json={"passes": None}).json() == {"held": 0, "passes_left": None}
        third.join(30)
        assert third_status == [200]
        assert [client.post("/v1/responses", json=BODY).status_code for _ in range(5)] == [200] * 5


def test_a_gate_closed_from_the_start_holds_the_first_call():
    with gated_client(0) as client:
        call, status = held_call(client)
        wait_until_held(client, 1)
        client.post(GATE_PATH, json={"passes": 0})
        call.join(30)
        assert status == [200] and client.get(GATE_PATH).json() == {"held": 0, "passes_left": 0}


def test_bad_passes_are_refused_and_no_gate_means_no_route():
    with gated_client(1) as client:
        for passes in (-1, 1.5, True, "3"):
            assert client.post(GATE_PATH, json={"passes": passes}).status_code == 422
        assert client.get(GATE_PATH).json() == {"held": 0, "passes_left": 1}
    with gated_client(None) as client:
        assert client.get(GATE_PATH).status_code == 404
        assert client.post("/v1/responses", json=BODY).status_code == 200
