"""verifiers-style access: an agent loop outside the stack that speaks the resources-server
protocol itself (`/seed_session`, its cookie, `POST /<tool>`, `/verify`), as docs/training.md
shows it. Two sessions at once keep their state apart through their own cookie jars."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.protocol
REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "server_images/stateful_counter"


def assistant_says(text: str) -> dict:
    return {"id": "resp_external", "created_at": 0, "model": "my-own-model", "object": "response",
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
            "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}]}


def external_episode(base_url: str, row: dict, amounts: list[int]) -> tuple[list[int], dict]:
    """The loop docs/training.md documents: one client (one cookie jar) per episode."""
    with httpx.Client(base_url=base_url, timeout=30) as session:
        assert session.post("/seed_session", json=row).status_code == 200
        assert session.cookies, "the resources server set no session cookie"
        seen = [session.post("/increment", json={"amount": amount}).json()["value"] for amount in amounts]
        final = session.post("/read_counter", json={}).json()["value"]
        verified = session.post("/verify", json={**row, "response": assistant_says(f"The counter is {final}")})
        assert verified.status_code == 200, verified.text
        return seen, verified.json()


def test_an_agent_loop_outside_the_stack_keeps_its_session_by_cookie(start_stack):
    config = {"stateful_counter": {"resources_servers": {"stateful_counter": {"entrypoint": "app.py",
                                                                             "domain": "other"}}}}
    stack = start_stack(config, {"stateful_counter": SERVER})
    spec = stack.config["stateful_counter"]["resources_servers"]["stateful_counter"]
    base_url = f"http://{spec['host']}:{spec['port']}"
    row = json.loads((SERVER / "data/example.jsonl").read_text().splitlines()[0])
    row = {**row, "initial_value": 10, "expected_answer": 17}

    with httpx.Client(base_url=base_url, timeout=30) as other:  # a second episode, interleaved
        other.post("/seed_session", json={**row, "initial_value": 100})
        seen, verified = external_episode(base_url, row, [3, 4])
        assert other.post("/read_counter", json={}).json()["value"] == 100  # untouched by the first
    assert seen == [13, 17]
    assert verified["reward"] == 1.0 and verified["final_value"] == 17
    with httpx.Client(base_url=base_url, timeout=30) as stranger:  # no cookie: no session state
        assert stranger.post("/read_counter", json={}).status_code >= 400
