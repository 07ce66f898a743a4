"""A failure names its cause: error bodies carried through every hop, time budgets handed down,
one writer per run folder, and a rollout counted once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import orjson
import pytest

from gym_compose.collect import dispatch
from gym_compose.collect.lock import RunFolderBusy, RunFolderLock, current_holder
from gym_compose.collect.routing import EnvironmentServer
from gym_compose.metrics.row_keys import first_of_each_rollout
from gym_compose.net.http_client import PeerStatusError
from gym_compose.net.web import server_error_body
from gym_compose.server import time_budget

ENV = EnvironmentServer("my_env", "http://my-env:8000", ("my_agent",))


def test_an_error_from_deep_in_the_chain_reaches_the_failure_row_with_its_type_and_server():
    model_error = orjson.dumps({"error": "upstream model endpoint http://x/v1 failed: 429", "type": "upstream_error"})
    in_agent = PeerStatusError("policy_model", "/v1/responses", 502, model_error)
    agent_body = orjson.dumps(server_error_body(in_agent, "my_agent", "/v1/responses"))
    in_env = PeerStatusError("my_agent", "/v1/responses", 500, agent_body)
    env_body = orjson.dumps(server_error_body(in_env, "my_env", "/run"))

    error_type, message = dispatch.describe_error_answer(ENV, 500, env_body)
    assert error_type == "upstream_error"
    assert message == "upstream model endpoint http://x/v1 failed: 429 (upstream_error in policy_model, via my_env)"


def test_an_error_raised_in_the_environment_server_itself_names_it():
    body = orjson.dumps(server_error_body(KeyError("verify"), "my_env", "/run"))
    assert dispatch.describe_error_answer(ENV, 500, body) == ("KeyError", "'verify' (KeyError in my_env)")


def test_other_error_bodies_say_what_they_can():
    refused = orjson.dumps({"detail": [{"loc": ["body", "responses_create_params", "input"], "msg": "Field required"}]})
    assert dispatch.describe_error_answer(ENV, 422, refused) == (
        "RequestValidationError", "my_env answered 422: the row was refused: body.responses_create_params.input: Field required")
    assert dispatch.describe_error_answer(ENV, 503, b"<html>busy</html>") == (
        "HTTPStatusError", "my_env answered 503: <html>busy</html>")
    assert dispatch.describe_error_answer(ENV, 500, b"")[1] == "my_env answered 500 with an empty body"


def test_the_time_budget_shrinks_at_each_hop_so_the_innermost_call_times_out_first():
    scope = {"headers": [(b"x-gym-time-left", b"10")]}

    async def one_hop():
        time_budget.adopt_from_scope(scope)
        return time_budget.call_timeout(3600.0)

    import asyncio

    first = asyncio.run(one_hop())
    assert 7.5 < first < 8.0  # 10 s less a 2 s margin
    scope = {"headers": [(b"x-gym-time-left", f"{first}".encode())]}
    second = asyncio.run(one_hop())
    assert second < first - 1.9
    assert asyncio.run(_no_header()) == 42.0  # no budget: the configured timeout
    assert dispatch.TIME_LEFT_HEADER == time_budget.TIME_LEFT_HEADER  # both sides of the container boundary


async def _no_header():
    return time_budget.call_timeout(42.0)


def test_a_run_folder_has_one_writer_and_the_refusal_names_it(tmp_path):
    with RunFolderLock(tmp_path):
        assert re.match(rf"pid {os.getpid()} (on host|in container) \S+, since ", current_holder(tmp_path))
        with pytest.raises(RunFolderBusy, match=rf"being written by another collector: pid {os.getpid()} "):
            RunFolderLock(tmp_path).acquire()
    assert current_holder(tmp_path) is None


def test_a_dead_holders_lock_is_taken_over(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from gym_compose.collect.lock import "
         "RunFolderLock; RunFolderLock(Path(sys.argv[1])).acquire(); print('held', flush=True); time.sleep(600)",
         str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert f"pid {holder.pid}" in current_holder(tmp_path)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    deadline = time.monotonic() + 10
    while current_holder(tmp_path) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    with RunFolderLock(tmp_path):
        assert f"pid {os.getpid()}" in current_holder(tmp_path)


def test_each_rollout_counts_once_whatever_the_file_holds():
    rows = [{"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1},
            {"_ng_task_index": 0, "_ng_rollout_index": 1, "reward": 0},
            {"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 0}]
    assert first_of_each_rollout(rows) == rows[:2]
