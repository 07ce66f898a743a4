"""The server runtime over real HTTP on loopback, servers started by the container entry."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time

import httpx
import pytest
import yaml
from conftest import NEMO_GYM_FIXTURES, SERVER_IMAGES

from gym_compose.net.http_client import HttpClient
from gym_compose.net.incarnation import CALLER_HEADER
from tests.support.stacks import gymnasium_stack, point_proxy_at_mock, seed_verify_stack

pytestmark = pytest.mark.protocol

WEATHER = "example_single_tool_call"


def fixture_rows(name: str) -> list[dict]:
    path = NEMO_GYM_FIXTURES / name / "example.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def local_rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (SERVER_IMAGES / name / "data" / "example.jsonl").read_text().splitlines()]


def run_all(url: str, rows: list[dict], timeout: float = 20.0) -> list[httpx.Response]:
    with httpx.Client(timeout=timeout) as client:
        return [client.post(f"{url}/run", json=row) for row in rows]


@pytest.mark.parametrize("api_mode", ["responses", "chat_completions"])
def test_nemo_gym_fixture_rows_get_reward_one_through_the_proxy(tmp_path, api_mode):
    from gym_compose.engine.targets.local_processes import LocalProcesses, with_local_addresses

    rows = fixture_rows(WEATHER)
    config = point_proxy_at_mock(with_local_addresses(seed_verify_stack(WEATHER, proxied=True, api_mode=api_mode)))
    with LocalProcesses(config, server_dirs={WEATHER: SERVER_IMAGES / WEATHER}, log_dir=tmp_path) as stack:
        answers = run_all(stack.url("environment"), rows)
    for row, answer in zip(rows, answers, strict=True):
        assert answer.status_code == 200, answer.text
        result = answer.json()
        assert result["reward"] == 1.0
        assert result["response"]["model"] == "gym-compose-mock-model"
        kinds = [item["type"] for item in result["response"]["output"]]
        assert kinds == ["function_call", "function_call_output", "message"]
        assert result["responses_create_params"]["input"][-1]["content"] == row["responses_create_params"]["input"][-1]["content"]
        assert result["response"]["usage"]["total_tokens"] > 0


@pytest.mark.parametrize("mode, reward", [("oracle", 1.0), ("adversary", 0.0)])
def test_checking_verifier_tells_oracle_from_adversary(start_stack, mode, reward):
    calculator = start_stack(seed_verify_stack("calculator", mode=mode), {"calculator": SERVER_IMAGES / "calculator"})
    gym = start_stack(gymnasium_stack("calculator_gymnasium", mode=mode),
                      {"calculator_gymnasium": SERVER_IMAGES / "calculator_gymnasium"})
    rows = local_rows("calculator")
    for stack in (calculator, gym):
        for answer in run_all(stack.url("environment"), rows):
            assert answer.status_code == 200, answer.text
            assert answer.json()["reward"] == reward


def test_blackjack_fixture_rows_end_terminated_or_truncated(start_stack):
    rows = fixture_rows("blackjack")
    stack = start_stack(gymnasium_stack("blackjack"), {"blackjack": SERVER_IMAGES / "blackjack"})
    for row, answer in zip(rows, run_all(stack.url("environment"), rows), strict=True):
        assert answer.status_code == 200, answer.text
        result = answer.json()
        assert result["terminated"] or result["truncated"]
        assert result["reward"] in (-1.0, 0.0, 1.0)
        assert result["agent_ref"] == row["agent_ref"]
        assert result["info"]["result"] in ("win", "push", "loss", "bust")


def test_gymnasium_agent_truncates_at_max_steps_and_closes_the_session(start_stack):
    row = {"responses_create_params": {"input": "play", "metadata": {
        "gym_mock_script": json.dumps([{"text": "<action>hit</action>"}] * 5)}}, "seed": 3}
    stack = start_stack(gymnasium_stack("blackjack", max_steps=1), {"blackjack": SERVER_IMAGES / "blackjack"})
    result = run_all(stack.url("environment"), [row])[0].json()
    if result["info"].get("result") == "bust":  # hit busted on the first card: a terminal end
        assert result["terminated"]
    else:
        assert result["truncated"] and not result["terminated"]


def test_200_concurrent_sessions_keep_their_state_apart(start_stack):
    stack = start_stack(seed_verify_stack("stateful_counter"), {"stateful_counter": SERVER_IMAGES / "stateful_counter"})
    port = stack.port("stateful_counter")

    async def one_session(client: HttpClient, index: int) -> int:
        # HttpClient keeps no cookie jar: each session sends only its own cookie
        seeded = await client.request("POST", "127.0.0.1", port, "/seed_session", json={"initial_value": index})
        cookies = seeded.cookies
        await client.request("POST", "127.0.0.1", port, "/increment", json={"amount": index}, cookies=cookies)
        await asyncio.sleep(0)  # let the other sessions' requests in between
        read = await client.request("POST", "127.0.0.1", port, "/read_counter", json={}, cookies=cookies)
        return read.json()["value"]

    async def all_sessions() -> list[int]:
        client = HttpClient(timeout=30)
        try:
            return await asyncio.wait_for(asyncio.gather(*(one_session(client, i) for i in range(200))), 60)
        finally:
            await client.aclose()

    assert asyncio.run(all_sessions()) == [2 * index for index in range(200)]


def test_stateful_rollouts_reward_one(start_stack):
    stack = start_stack(seed_verify_stack("stateful_counter"), {"stateful_counter": SERVER_IMAGES / "stateful_counter"})
    for answer in run_all(stack.url("environment"), local_rows("stateful_counter")):
        assert answer.status_code == 200, answer.text
        assert answer.json()["reward"] == 1.0


def test_malformed_bodies_get_422_naming_the_field(start_stack):
    stack = start_stack(seed_verify_stack(WEATHER), {WEATHER: SERVER_IMAGES / WEATHER})
    with httpx.Client(timeout=10) as client:
        unknown_key = client.post(f"{stack.url('environment')}/run",
                                  json={"responses_create_params": {"input": "hi", "temprature": 0.5}})
        assert unknown_key.status_code == 422
        assert unknown_key.json()["detail"][0]["loc"] == ["body", "responses_create_params", "temprature"]
        missing = client.post(f"{stack.url('agent')}/run", json={"rows": []})
        assert missing.status_code == 422 and "responses_create_params" in missing.text
        not_json = client.post(f"{stack.url('agent')}/run", content=b"{not json")
        assert not_json.status_code == 422
        tool = client.post(f"{stack.url(WEATHER)}/get_weather", json={"town": "Oslo"})
        assert tool.status_code == 422 and tool.json()["detail"][0]["loc"] == ["body", "city"]


def test_unknown_tool_becomes_a_tool_output_and_the_episode_goes_on(start_stack):
    script = [{"tool": "no_such_tool", "arguments": {}}, {"tool": "get_weather", "arguments": {"city": "Oslo"}},
              {"text": "done"}]
    row = {"responses_create_params": {"input": "weather?", "metadata": {"gym_mock_script": json.dumps(script)}}}
    stack = start_stack(seed_verify_stack(WEATHER), {WEATHER: SERVER_IMAGES / WEATHER})
    result = run_all(stack.url("environment"), [row])[0].json()
    outputs = [item for item in result["response"]["output"] if item["type"] == "function_call_output"]
    assert "unknown tool 'no_such_tool'" in outputs[0]["output"]
    assert "Oslo" in outputs[1]["output"]
    assert result["reward"] == 1.0


FAULTY_APP = textwrap.dedent('''
    from fastapi import FastAPI
    from nemo_gym.base_resources_server import BaseVerifyRequest, SimpleResourcesServer

    class FaultyServer(SimpleResourcesServer):
        def setup_webserver(self) -> FastAPI:
            app = super().setup_webserver()
            app.post("/explode")(self.explode)
            return app

        async def explode(self) -> dict:
            raise RuntimeError("tool blew up")

        async def verify(self, body: BaseVerifyRequest):
            raise ValueError("verifier exploded on purpose")

    if __name__ == "__main__":
        FaultyServer.run_webserver()
''')


def test_raising_verifier_fails_the_rollout_with_the_reason_and_servers_keep_serving(start_stack, tmp_path):
    app_dir = tmp_path / "faulty"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(FAULTY_APP)
    stack = start_stack(seed_verify_stack("faulty"), {"faulty": app_dir})
    row = {"responses_create_params": {"input": "hi"}}
    with httpx.Client(timeout=10) as client:
        failed = client.post(f"{stack.url('environment')}/run", json=row)
        assert failed.status_code == 500
        assert "verifier exploded on purpose" in failed.text
        exploded = client.post(f"{stack.url('faulty')}/explode", json={})
        assert exploded.status_code == 500 and exploded.json()["error"] == "tool blew up"
        assert client.get(f"{stack.url('faulty')}/").status_code == 200
        assert client.post(f"{stack.url('faulty')}/seed_session", json={}).status_code == 200


def test_idle_sessions_are_reaped(start_stack):
    config = seed_verify_stack("stateful_counter")
    config["stateful_counter"]["resources_servers"]["stateful_counter"]["session_idle_timeout_seconds"] = 0.3
    stack = start_stack(config, {"stateful_counter": SERVER_IMAGES / "stateful_counter"})
    url = stack.url("stateful_counter")
    with httpx.Client(timeout=10) as client:
        cookies = dict(client.post(f"{url}/seed_session", json={"initial_value": 1}).cookies)
        assert client.post(f"{url}/increment", json={"amount": 1}, cookies=cookies).json() == {"value": 2}
        time.sleep(1.0)  # idle: any request would touch the session, so there is nothing to poll
        reaped = client.post(f"{url}/read_counter", json={}, cookies=cookies)
        assert reaped.status_code == 500 and "never seeded (or was reaped" in reaped.text


def test_a_callers_sessions_are_given_back_when_its_container_restarts(start_stack):
    # an agent killed mid-run never closes its sessions; its later start's first call gives them back
    stack = start_stack(seed_verify_stack("stateful_counter"), {"stateful_counter": SERVER_IMAGES / "stateful_counter"})
    url = stack.url("stateful_counter")

    def seeded(client, caller=None) -> dict:
        headers = {CALLER_HEADER: caller} if caller else {}
        cookies = dict(client.post(f"{url}/seed_session", json={"initial_value": 1}, headers=headers).cookies)
        client.cookies.clear()  # each seed opens a session of its own
        return cookies

    def read(client, cookies) -> httpx.Response:
        return client.post(f"{url}/read_counter", json={}, cookies=cookies)

    with httpx.Client(timeout=10) as client:
        first_start, other_host, unnamed = seeded(client, "agent-host@100"), seeded(client, "other@7"), seeded(client)
        assert read(client, first_start).json() == {"value": 1}
        seeded(client, "agent-host@100")  # the same start again changes nothing
        assert read(client, first_start).json() == {"value": 1}
        later_start = seeded(client, "agent-host@200")
        deadline = time.monotonic() + 10
        while read(client, first_start).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.05)  # given back by a task the later start's call scheduled
        gone = read(client, first_start)
        assert gone.status_code == 500 and "never seeded (or was reaped" in gone.text
        for kept in (other_host, unnamed, later_start):
            assert read(client, kept).json() == {"value": 1}


def test_head_discovery_readiness_and_healthcheck(start_stack):
    stack = start_stack(seed_verify_stack(WEATHER), {WEATHER: SERVER_IMAGES / WEATHER})
    head = stack.url("head_server")
    with httpx.Client(timeout=10) as client:
        assert client.get(f"{head}/").json() == {"status": "ok"}
        served = yaml.safe_load(client.get(f"{head}/global_config_dict_yaml").json())
        assert served["agent"] == stack.config["agent"]
        instances = {entry["name"]: entry for entry in client.get(f"{head}/server_instances").json()}
        assert instances["agent"]["url"] == stack.url("agent")
        assert instances["environment"]["server_type"] == "environment_servers"
        for name in ("agent", "environment", "policy_model", WEATHER):
            assert client.get(f"{stack.url(name)}/").status_code == 200
            assert client.get(f"{stack.url(name)}/_gym_compose/ready").status_code == 200
    check = [sys.executable, "-m", "gym_compose.server.healthcheck"]
    assert subprocess.run([*check, str(stack.port("agent"))], timeout=10).returncode == 0
    stack.processes["agent"].terminate()
    stack.processes["agent"].wait(timeout=10)
    assert subprocess.run([*check, str(stack.port("agent"))], timeout=10).returncode == 1
