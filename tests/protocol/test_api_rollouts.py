"""The Python API's rollout path on loopback: rows from the host to the environment servers
(`gym_compose.api.rollouts`, what `Stack.rollouts` runs), failures as rows, the aggregate
metrics from the servers, and a model server's upstreams switched while it runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from gym_compose.api import is_failure
from gym_compose.api.rollouts import aggregate_metrics, numbered, rollouts
from gym_compose.api.upstreams import put_upstreams
from gym_compose.collect.routing import routing_table_from_config
from gym_compose.errors import UserError
from tests.support.stacks import seed_verify_stack
from tests.support.trainer_checks import assert_trainable, start_fake_vllm

pytestmark = pytest.mark.protocol
REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "server_images/example_single_tool_call"


def requests_to(fake) -> int:
    port = fake.server_address[1]
    chat = httpx.get(f"http://127.0.0.1:{port}/_fake/requests").json()
    return sum(1 for r in chat if r["path"] == "/v1/chat/completions")


async def collect(routing, rows, parallel):
    return [row async for row in rollouts(routing, rows, parallel)]


def test_rollouts_stream_trainable_rows_failures_as_rows_and_follow_a_switch_of_upstreams(start_stack):
    first, second = start_fake_vllm(), start_fake_vllm()
    try:
        config = seed_verify_stack("example_single_tool_call")
        config["policy_model"] = {"responses_api_models": {"vllm_model": {
            "entrypoint": "app.py", "base_url": f"http://127.0.0.1:{first.server_address[1]}/v1",
            "api_key": "dummy-key", "model": "fake-model", "return_token_id_information": True}}}
        stack = start_stack(config, {"example_single_tool_call": SERVER})
        routing = routing_table_from_config(stack.config)
        rows = [json.loads(line) for line in (SERVER / "data/example.jsonl").read_text().splitlines()]

        before = asyncio.run(collect(routing, rows + [{"responses_create_params": "not params"}], 3))
        assert len(before) == len(rows) + 1
        failed = [row for row in before if is_failure(row)]
        assert [row["_ng_task_index"] for row in failed] == [len(rows)]  # the broken row, as a value
        finished = [row for row in before if not is_failure(row)]
        assert sorted(row["_ng_task_index"] for row in finished) == list(range(len(rows)))
        assert all(assert_trainable(row) == 2 for row in finished)  # tool call, then the answer
        assert requests_to(second) == 0

        model = stack.config["policy_model"]["responses_api_models"]["vllm_model"]
        new_url = f"http://127.0.0.1:{second.server_address[1]}/v1"
        # a loopback URL means the host to a container: rewritten (here the model runs on the host)
        assert put_upstreams("policy_model", f"http://127.0.0.1:{model['port']}", [new_url]) == [
            new_url.replace("127.0.0.1", "host.docker.internal")]
        put_upstreams_direct(model["port"], new_url)
        served_by_first = requests_to(first)
        after = asyncio.run(collect(routing, rows, 2))
        assert all(assert_trainable(row) == 2 for row in after)
        assert requests_to(first) == served_by_first and requests_to(second) == 2 * len(rows)

        [entry] = aggregate_metrics(routing, finished + failed)
        assert entry["agent_ref"] == {"name": "agent"} and entry["_ng_environment_server"] == "environment"
        assert entry["agent_metrics"]["mean/reward"] == pytest.approx(
            sum(r["reward"] for r in finished) / len(finished))
    finally:
        first.shutdown()
        second.shutdown()


def put_upstreams_direct(port: int, url: str) -> None:
    """On loopback the model server runs on the host, so give it the loopback URL itself."""
    answer = httpx.put(f"http://127.0.0.1:{port}/_gym_compose/upstreams", json={"base_url": [url]})
    assert answer.status_code == 200, answer.text


def test_rows_that_cannot_be_routed_or_are_not_rows_are_refused_before_anything_runs():
    routing = routing_table_from_config({})
    with pytest.raises(UserError, match="cannot be routed"):
        asyncio.run(collect(routing, [{"responses_create_params": {"input": "hi"}}], 1))
    with pytest.raises(UserError, match=r"rows\[0\] is a str"):
        numbered(["not a row"])
    with pytest.raises(UserError, match="parallel must be 1 or more"):
        asyncio.run(collect(routing, [], 0))
