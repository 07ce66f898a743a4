"""Upstream faults against a misbehaving loopback endpoint: each retried or failed with a clear
reason, never a hang, never a second rollout.

The client-level tests drive `UpstreamClient` directly; the last two run the collector through
environment -> simple_agent -> openai_model -> the misbehaving endpoint as the containers do.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gym_compose.server.models.upstream import UpstreamCallConfig, UpstreamClient, UpstreamError, retry_after_seconds
from tests.fakes.scripted_upstream import Answer, Hang, Reset, ScriptedUpstream, chat_completion
from tests.support.stacks import seed_verify_stack

pytestmark = pytest.mark.protocol
REPO = Path(__file__).resolve().parents[2]
SERVER_IMAGES = REPO / "server_images"
FAST = {"retry_backoff_seconds": 0.05, "max_retry_backoff_seconds": 0.2}


def call(upstream: ScriptedUpstream, limit_s: float = 30, **settings) -> dict:
    """One chat completion through a fresh client; the test fails (not hangs) past limit_s."""
    async def run() -> dict:
        client = UpstreamClient(upstream.base_url, UpstreamCallConfig(**{**FAST, **settings}))
        try:
            return await asyncio.wait_for(client.post_json("/chat/completions", {"messages": []}), limit_s)
        finally:
            await client.aclose()

    return asyncio.run(run())


class RecordedSleeps:
    """asyncio as the upstream client sees it, with its sleeps recorded instead of waited (a fake clock)."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def __getattr__(self, name: str):
        return getattr(asyncio, name)

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        await asyncio.sleep(0)


def test_429_with_retry_after_waits_as_asked_then_succeeds(caplog, monkeypatch):
    from gym_compose.server.models import upstream as upstream_module

    sleeps = RecordedSleeps()
    monkeypatch.setattr(upstream_module, "asyncio", sleeps)
    caplog.set_level(logging.WARNING, "gym_compose.server.upstream")
    with ScriptedUpstream([Answer(429, {"Retry-After": "1"}, {"error": "slow down"})]) as upstream:
        answer = call(upstream)
        posts = upstream.posts()
    assert answer["choices"][0]["message"]["content"] == "42"
    assert len(posts) == 2
    assert sleeps.slept == [1.0]  # the wait the upstream asked for, exactly
    assert "HTTP 429; retry 1/3 in 1.0 s" in caplog.text


def test_retry_after_past_the_deadline_fails_at_once_saying_so():
    with ScriptedUpstream([Answer(429, {"Retry-After": "120"}, {"error": "come back later"})]) as upstream:
        with pytest.raises(UpstreamError) as caught:
            call(upstream, request_timeout_seconds=5)
        assert len(upstream.posts()) == 1
    message = str(caught.value)
    assert f"{upstream.base_url}/chat/completions answered HTTP 429" in message
    assert "asked to retry after 120.0 s" in message and "request_timeout_seconds" in message
    assert caught.value.status == 502 and caught.value.upstream_status == 429


def test_503_then_success_is_retried():
    with ScriptedUpstream([Answer(503, body={"error": "warming up"}), Answer(503, body={"error": "still"})]) as upstream:
        answer = call(upstream)
        assert len(upstream.posts()) == 3
    assert answer["usage"]["completion_tokens"] == 1


def test_a_5xx_that_never_ends_gives_up_after_max_retries_naming_endpoint_status_and_attempts():
    with ScriptedUpstream(default=Answer(503, body={"error": "overloaded"})) as upstream:
        with pytest.raises(UpstreamError) as caught:
            call(upstream, max_retries=2)
        assert len(upstream.posts()) == 3
    message = str(caught.value)
    assert f"upstream model endpoint {upstream.base_url}/chat/completions answered HTTP 503" in message
    assert "gave up after 3 attempts (max_retries: 2)" in message and "overloaded" in message


def test_a_reset_connection_is_retried_on_a_new_one():
    with ScriptedUpstream([Reset()]) as upstream:
        answer = call(upstream)
        assert len(upstream.posts()) == 2
    assert answer["id"] == "chatcmpl-scripted"


def test_an_endpoint_that_never_answers_fails_after_the_read_timeout_and_is_not_asked_again():
    with ScriptedUpstream(default=Hang()) as upstream:
        with pytest.raises(UpstreamError) as caught:
            call(upstream, limit_s=20, read_timeout_seconds=1)
        assert len(upstream.posts()) == 1
    assert "no answer within 1 s (read_timeout_seconds); not retried" in str(caught.value)
    assert caught.value.status == 504


def test_the_whole_call_is_bounded_by_request_timeout_seconds():
    with ScriptedUpstream([Answer(503), Answer(503)], default=Hang()) as upstream:
        with pytest.raises(UpstreamError) as caught:
            call(upstream, limit_s=20, read_timeout_seconds=60, request_timeout_seconds=1.5)
        assert len(upstream.posts()) == 3
    assert "the 1.5 s the whole call may take (request_timeout_seconds)" in str(caught.value)


def test_a_refused_connection_is_retried_then_fails_naming_the_endpoint():
    from tests.support.ports import free_port

    port = free_port()
    dead = ScriptedUpstream()
    dead.port = port  # nothing listens there
    with pytest.raises(UpstreamError) as caught:
        call(dead, max_retries=1)
    assert f"upstream model endpoint http://127.0.0.1:{port}/v1/chat/completions failed: cannot connect" in str(caught.value)
    assert "gave up after 2 attempts" in str(caught.value)


@pytest.mark.parametrize("step, status", [
    (Answer(400, body={"error": {"message": "bad request"}}), 400),
    (Answer(401, body={"error": {"message": "no key"}}), 502),
    (Answer(429, body={"error": {"code": "insufficient_quota", "message": "spent"}}), 502),
])
def test_answers_that_cannot_get_better_are_not_retried(step, status):
    with ScriptedUpstream([step]) as upstream:
        with pytest.raises(UpstreamError) as caught:
            call(upstream)
        assert len(upstream.posts()) == 1
    assert caught.value.status == status
    assert f"answered HTTP {step.status}" in str(caught.value)


def test_concurrent_calls_are_capped_per_server():
    async def run(upstream: ScriptedUpstream) -> list[dict]:
        client = UpstreamClient(upstream.base_url, UpstreamCallConfig(max_concurrent_requests=2))
        try:
            return await asyncio.wait_for(asyncio.gather(
                *(client.post_json("/chat/completions", {"messages": [], "n": i}) for i in range(6))), 30)
        finally:
            await client.aclose()

    with ScriptedUpstream(default=Answer(delay_s=0.2)) as upstream:
        answers = asyncio.run(run(upstream))
        assert len(upstream.posts()) == 6
        assert upstream.max_in_flight == 2
    assert len(answers) == 6


def test_retry_after_forms():
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


# ---- through the stack: the collector sees one row per rollout, whatever the upstream does ----

def proxied_stack(base_url: str, **upstream_settings) -> dict:
    config = seed_verify_stack("example_single_tool_call", proxied=True, api_mode="chat_completions")
    del config["mock_upstream"]
    model = config["policy_model"]["responses_api_models"]["openai_model"]
    model.update(openai_base_url=base_url, forward_task_header=False, **FAST, **upstream_settings)
    return config


def collect(stack, rows: Path, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": yaml.safe_dump(stack.config)}
    command = [sys.executable, "-m", "gym_compose.collect", "--input", str(rows), "--output-dir", str(out),
               "--num-samples-in-parallel", "4"]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def example_rows(tmp_path: Path, n: int) -> Path:
    lines = (SERVER_IMAGES / "example_single_tool_call/data/example.jsonl").read_text().splitlines()[:n]
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(lines) + "\n")
    return rows


def test_a_misbehaving_upstream_still_gives_exactly_one_rollout_per_row(start_stack, tmp_path):
    script = [Answer(429, {"Retry-After": "1"}, {"error": "rate"}), Answer(503), Reset(), Answer(502)]
    with ScriptedUpstream(script, default=Answer(body=chat_completion("It is sunny.", 20, 4))) as upstream:
        stack = start_stack(proxied_stack(upstream.base_url),
                            {"example_single_tool_call": SERVER_IMAGES / "example_single_tool_call"})
        done = collect(stack, example_rows(tmp_path, 4), tmp_path / "out")
        posts = upstream.posts()
    assert done.returncode == 0, done.stderr
    rollouts = read_jsonl(tmp_path / "out" / "rollouts.jsonl")
    assert sorted(row["_ng_task_index"] for row in rollouts) == [0, 1, 2, 3]
    assert read_jsonl(tmp_path / "out" / "rollouts_failures.jsonl") == []
    assert all(row["response"]["usage"]["output_tokens"] == 4 for row in rollouts)
    assert len(posts) == 4 + len(script)  # one model turn per row, plus one resend per fault


def test_an_upstream_that_never_answers_fails_each_rollout_once_with_the_reason(start_stack, tmp_path):
    with ScriptedUpstream(default=Hang()) as upstream:
        stack = start_stack(proxied_stack(upstream.base_url, read_timeout_seconds=2),
                            {"example_single_tool_call": SERVER_IMAGES / "example_single_tool_call"})
        done = collect(stack, example_rows(tmp_path, 3), tmp_path / "out")
        posts = upstream.posts()
    assert done.returncode == 1, done.stderr
    assert read_jsonl(tmp_path / "out" / "rollouts.jsonl") == []
    failures = read_jsonl(tmp_path / "out" / "rollouts_failures.jsonl")
    assert sorted(row["_ng_task_index"] for row in failures) == [0, 1, 2]
    for row in failures:
        text = json.dumps(row)
        assert f"{upstream.base_url}/chat/completions" in text and "read_timeout_seconds" in text, text
    assert len(posts) == 3
