"""The mock model answers a request for structured output (a judge asking for JSON) with JSON its
schema accepts, on both APIs (gym_compose/server/models/mock_structured.py)."""

from __future__ import annotations

import json
from enum import Enum
from typing import Optional

from pydantic import BaseModel
from starlette.testclient import TestClient

from gym_compose.server.models.mock_model import PLAIN_ANSWER, MockModel, MockModelConfig
from gym_compose.server.models.mock_structured import structured_answer


class Verdict(str, Enum):
    correct = "correct"
    wrong = "wrong"


class Evidence(BaseModel):
    quote: str
    line: int


class Judgment(BaseModel):
    verdict: Verdict
    confidence: float
    evidence: list[Evidence]
    note: Optional[str] = None


def test_the_example_validates_against_a_pydantic_schema_with_refs_enums_and_optionals():
    body = {"response_format": {"type": "json_schema", "json_schema": {"name": "j", "schema":
                                                                       Judgment.model_json_schema()}}}
    answer = structured_answer(body)
    assert answer is not None
    judged = Judgment.model_validate_json(answer)
    assert judged.verdict is Verdict.correct and judged.evidence[0].line == 1
    assert structured_answer({"response_format": {"type": "json_object"}}) == "{}"
    assert structured_answer({"messages": []}) is None


def test_both_apis_answer_json_when_asked_and_plain_text_otherwise():
    server = MockModel(config=MockModelConfig(name="judge", mode="plain"))
    schema = Judgment.model_json_schema()
    with TestClient(server.setup_webserver()) as client:
        chat = client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "judge this"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "j", "schema": schema}}}).json()
        Judgment.model_validate_json(chat["choices"][0]["message"]["content"])
        responses = client.post("/v1/responses", json={
            "input": "judge this", "text": {"format": {"type": "json_schema", "name": "j", "schema": schema}}}).json()
        Judgment.model_validate(json.loads(responses["output"][0]["content"][0]["text"]))
        plain = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}).json()
        assert plain["choices"][0]["message"]["content"] == PLAIN_ANSWER
