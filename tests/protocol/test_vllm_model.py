"""vllm_model against a fake vLLM on loopback, side by side with NeMo Gym 0.7's own vllm_model.

tests/fixtures/vllm_model/nemo_gym_0.7.0.json holds what NeMo Gym's vllm_model answered and sent
upstream for each scenario of scenarios.json against the same fake (recorded by
record_nemo_gym.py; scripts/compare_vllm_model re-records it and runs this file). Ours must
answer the same body (random ids aside) and send vLLM the same requests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from gym_compose.server.context import ServerContext
from gym_compose.server.models.vllm_model import VLLMModel, VLLMModelConfig
from gym_compose.server.runtime import finish_app
from tests.fakes.fake_vllm import serve_in_thread
from tests.fixtures.vllm_model.scenarios import load, normalize, scenario_requests

pytestmark = pytest.mark.protocol
REPO = Path(__file__).resolve().parents[2]
RECORDED = json.loads((REPO / "tests/fixtures/vllm_model/nemo_gym_0.7.0.json").read_text())["scenarios"]


@pytest.fixture(scope="module")
def fake_vllm():
    server, base_url = serve_in_thread()
    yield base_url
    server.shutdown()


def client_for(config: dict, base_url: str) -> TestClient:
    model_config = VLLMModelConfig(name="policy_model", base_url=base_url, api_key="dummy-key", model="fake-model",
                                   **config)
    server = VLLMModel(config=model_config)
    context = ServerContext(name="policy_model", server_type="responses_api_models", implementation="vllm_model",
                            spec={}, global_config={}, bind_host="127.0.0.1", port=0)
    return TestClient(finish_app(server.setup_webserver(), context, server))


def ours(fake_vllm: str) -> dict[str, dict]:
    fake = fake_vllm.removesuffix("/v1")
    results: dict[str, dict] = {}
    for name, config, path, body in scenario_requests(RECORDED):
        httpx.post(f"{fake}/_fake/reset", json={})
        with client_for(config, fake_vllm) as client:
            answer = client.post(path, json=body)
        results[name] = {"status": answer.status_code, "response": normalize(answer.json()),
                         "upstream": httpx.get(f"{fake}/_fake/requests").json()}
    return results


def without_clock(response: dict) -> dict:
    """NeMo Gym stamps a locally made (empty) completion with the current time."""
    return {**response, "created_at": "<now>"} if response.get("created_at") not in (None, 1700000000.0) else response


@pytest.fixture(scope="module")
def side_by_side(fake_vllm):
    return ours(fake_vllm)


@pytest.mark.parametrize("scenario", [s["name"] for s in load()["scenarios"]])
def test_answers_exactly_as_nemo_gym_vllm_model(side_by_side, scenario):
    mine, theirs = side_by_side[scenario], RECORDED[scenario]
    assert mine["status"] == theirs["status"]
    assert without_clock(mine["response"]) == without_clock(theirs["response"])


@pytest.mark.parametrize("scenario", [s["name"] for s in load()["scenarios"]])
def test_sends_vllm_what_nemo_gym_vllm_model_sends(side_by_side, scenario):
    assert side_by_side[scenario]["upstream"] == RECORDED[scenario]["upstream"]


def test_token_ids_and_log_probs_ride_on_the_last_output_item(side_by_side):
    output = side_by_side["training_tool_call"]["response"]["output"]
    assert [item["type"] for item in output] == ["reasoning", "function_call"]
    last = output[-1]
    assert len(last["generation_token_ids"]) == len(last["generation_log_probs"]) > 0
    assert last["prompt_token_ids"] and "prompt_token_ids" not in output[0]
    follow_up = side_by_side["training_follow_up"]["upstream"][0]["body"]["messages"][1]
    assert follow_up["generation_token_ids"] == last["generation_token_ids"]  # the turn's tokens go back to vLLM


def test_misconfigurations_name_the_key():
    with pytest.raises(ValueError, match="use_completions_api: not supported"):
        VLLMModelConfig(name="m", base_url="http://x/v1", model="m", use_completions_api=True)
    with pytest.raises(ValueError, match="reasoning_field"):
        VLLMModelConfig(name="m", base_url="http://x/v1", model="m", reasoning_field="thoughts")


def test_a_request_with_no_chat_form_is_a_422_naming_the_item(fake_vllm):
    with client_for({}, fake_vllm) as client:
        answer = client.post("/v1/responses", json={"input": [{"type": "web_search_call", "id": "w"}]})
    assert answer.status_code == 422
    assert "input[0]: item type 'web_search_call'" in answer.json()["error"]


def test_context_overflow_is_passed_through_when_asked(fake_vllm):
    with client_for({"propagate_context_overflow_errors": True}, fake_vllm) as client:
        answer = client.post("/v1/responses", json={"input": "OVERFLOW"})
    assert answer.status_code == 400 and "maximum context length" in answer.json()["message"]


def test_a_rollouts_turns_stay_on_one_of_several_endpoints(fake_vllm):
    second, second_url = serve_in_thread()
    httpx.post(fake_vllm.removesuffix("/v1") + "/_fake/reset", json={})
    try:
        with client_for({"uses_reasoning_parser": False}, [fake_vllm, second_url]) as client:
            for _ in range(3):
                assert client.post("/v1/responses", json={"input": "Hi"}).status_code == 200
        counts = [len(httpx.get(url.removesuffix("/v1") + "/_fake/requests").json()) for url in (fake_vllm, second_url)]
    finally:
        second.shutdown()
    assert sorted(counts)[0] == 0  # one session (the client keeps its cookie): one endpoint took every turn


def test_the_upstreams_are_late_bound_and_replaced_without_a_restart(fake_vllm):
    second, second_url = serve_in_thread()
    fakes = [url.removesuffix("/v1") for url in (fake_vllm, second_url)]
    for fake in fakes:
        httpx.post(f"{fake}/_fake/reset", json={})
    try:
        with client_for({"uses_reasoning_parser": False}, fake_vllm) as client:
            assert client.get("/_gym_compose/upstreams").json() == {"base_url": [fake_vllm]}
            assert client.post("/v1/responses", json={"input": "Hi"}).status_code == 200
            switched = client.put("/_gym_compose/upstreams", json={"base_url": [second_url]})
            assert switched.status_code == 200 and switched.json() == {"base_url": [second_url]}
            assert client.post("/v1/responses", json={"input": "Hi"}).status_code == 200
            refused = client.put("/_gym_compose/upstreams", json={"base_url": ["ftp://nowhere"]})
            assert refused.status_code == 422 and "http(s) URL" in refused.json()["error"]
            assert client.put("/_gym_compose/upstreams", json={"base_url": []}).status_code == 422
            assert client.get("/_gym_compose/upstreams").json() == {"base_url": [second_url]}  # unchanged
        counts = [len(httpx.get(f"{fake}/_fake/requests").json()) for fake in fakes]
    finally:
        second.shutdown()
    assert counts == [1, 1]  # the turn after the switch went to the second endpoint only


def test_token_ids_arrive_in_the_rollout_rows_as_nemo_gym_shapes_them(start_stack, fake_vllm, tmp_path):
    """environment -> simple_agent -> vllm_model -> fake vLLM, collected: every model turn's last
    output item in the row carries the turn's token ids, with NeMo Gym's item fields."""
    import yaml

    from tests.support.stacks import seed_verify_stack

    config = seed_verify_stack("example_single_tool_call")
    config["policy_model"] = {"responses_api_models": {"vllm_model": {
        "entrypoint": "app.py", "base_url": fake_vllm, "api_key": "dummy-key", "model": "fake-model",
        "return_token_id_information": True, "uses_reasoning_parser": True,
        "chat_template_kwargs": {"enable_thinking": True}}}}
    stack = start_stack(config, {"example_single_tool_call": REPO / "server_images/example_single_tool_call"})
    rows = tmp_path / "rows.jsonl"
    rows.write_text((REPO / "server_images/example_single_tool_call/data/example.jsonl").read_text())
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": yaml.safe_dump(stack.config)}
    done = subprocess.run([sys.executable, "-m", "gym_compose.collect", "--input", str(rows), "--output-dir",
                           str(tmp_path / "out")], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rollouts = [json.loads(line) for line in (tmp_path / "out/rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 5
    recorded_items = {item["type"]: set(item) for scenario in ("training_tool_call", "training_follow_up")
                      for item in RECORDED[scenario]["response"]["output"]}
    for row in rollouts:
        output = row["response"]["output"]
        carrying = [item for item in output if "generation_token_ids" in item]
        assert [item["type"] for item in carrying] == ["function_call", "message"]  # two model turns
        for item in output:
            if item["type"] in recorded_items:
                assert set(item) == recorded_items[item["type"]], item
        first, second = carrying
        assert second["prompt_token_ids"][: len(first["prompt_token_ids"])] == first["prompt_token_ids"]
        assert row["response"]["usage"]["output_tokens"] > 0


def test_upstream_faults_are_retried_for_vllm_model_too():
    from tests.fakes.scripted_upstream import Answer, ScriptedUpstream, chat_completion

    script = [Answer(503, {"Retry-After": "0"}, {"error": "loading"}), Answer(429, body={"error": "busy"})]
    with ScriptedUpstream(script, default=Answer(body=chat_completion("ok"))) as upstream:
        with client_for({"uses_reasoning_parser": False, "retry_backoff_seconds": 0.01}, upstream.base_url) as client:
            answer = client.post("/v1/responses", json={"input": "Hi"})
        assert len(upstream.posts()) == 3
    assert answer.status_code == 200 and answer.json()["output"][0]["content"][0]["text"] == "ok"
