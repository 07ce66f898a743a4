"""math_answer: the final answer is found (boxed, else the last number) and checked by
math-verify for equivalence; the check runs in worker processes and a stuck one is stopped."""

import asyncio
import json
import sys
from pathlib import Path

import httpx
import pytest

from gym_compose.server.context import ServerContext
from gym_compose.server.runtime import finish_app
from gym_compose.server.testing import load_app as load_server_app

HERE = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def app_module():
    return load_server_app(HERE)


@pytest.fixture(scope="module")
def check(app_module):
    import answer_check  # on sys.path once the app is loaded

    return answer_check


def test_extraction_prefers_the_last_boxed_answer_then_the_last_number(check):
    assert check.extract_answer(r"first \boxed{1}, then $\boxed{\frac{a}{b+{c}}}$.") == (r"\frac{a}{b+{c}}", "boxed")
    text = "She sells 9 eggs for $2 each, so she makes $1,018.50 a day."
    assert check.extract_answer(text) == ("1018.50", "last_number")
    assert check.extract_answer("#### 3/4") == ("3/4", "last_number")
    assert check.extract_answer(r"no answer \boxed{unclosed") == (None, None)
    assert check.extract_answer("I do not know.") == (None, None)


@pytest.mark.parametrize("expected, text", [
    ("0.5", r"The final answer is $\boxed{\frac{1}{2}}$."),
    (r"\frac{1}{2}", "so it is 1/2"),
    (r"\left( 3, \frac{\pi}{2} \right)", r"$\boxed{(3, \pi/2)}$"),
    ("10", r"\boxed{10.0}"),
    (18, "She makes 9 * 2 = $18 every day."),
    (r"\text{Evelyn}", r"\boxed{\text{Evelyn}}"),
    (r"$x^2+2x+1$", r"\boxed{(x+1)^2}"),
])
def test_equivalent_answers_score(check, expected, text):
    assert check.check_answer(expected, text)["correct"], (expected, text)


@pytest.mark.parametrize("expected, text", [
    ("0.5", r"\boxed{0.6}"),
    ("18", "She makes 19 dollars."),
    (r"\left( 3, \frac{\pi}{2} \right)", r"\boxed{(3, \pi)}"),
    ("7", "I cannot tell."),
    (r"\text{Evelyn}", r"\boxed{\text{Bob}}"),
])
def test_different_answers_do_not(check, expected, text):
    assert not check.check_answer(expected, text)["correct"], (expected, text)


def response_with(text):
    return {"id": "r", "created_at": 0, "model": "m", "object": "response", "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "output": [
                {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": r"\boxed{99}"}]},
                {"type": "message", "id": "m", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": text, "annotations": []}]}]}


def serve(app_module, **config):
    server = app_module.MathAnswerServer(config={"name": "math_answer", **config})
    context = ServerContext(name="math_answer", server_type="resources_servers", implementation="math_answer",
                            spec={}, global_config={}, bind_host="127.0.0.1", port=0)
    return server, finish_app(server.setup_webserver(), context, server)


def test_verify_scores_the_last_message_through_worker_processes(app_module):
    server, app = serve(app_module)
    row = {"responses_create_params": {"input": "What is 6 * 7?"}, "question": "What is 6 * 7?", "expected_answer": 42}

    async def run():
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as client:
                right = await client.post("/verify", json={**row, "response": response_with(r"It is $\boxed{42}$.")})
                wrong = await client.post("/verify", json={**row, "response": response_with("It is 41.")})
                return right.json(), wrong.json(), server.workers().started
        finally:
            await server.workers().close()

    right, wrong, started = asyncio.run(run())
    assert (right["reward"], right["extracted_answer"], right["extraction"]) == (1.0, "42", "boxed")
    assert (wrong["reward"], wrong["extracted_answer"], wrong["extraction"]) == (0.0, "41", "last_number")
    assert right["expected_answer"] == 42 and right["question"] == "What is 6 * 7?"
    assert started == 1  # the second check reused the first worker


READY = "import sys, time; print('{\"ready\": true}', flush=True); "


def test_a_worker_that_never_gets_ready_fails_the_check_as_an_error(app_module):
    workers = app_module.CheckWorkers(1, 5, [sys.executable, "-c", "import sys; sys.exit(4)"], start_timeout_s=60)

    async def run():
        with pytest.raises(app_module.CheckerStartError, match="did not start within 60 s .exit code 4"):
            await workers.check(1, "1")

    asyncio.run(run())


def test_a_stuck_check_is_killed_and_scores_zero_with_the_reason(app_module):
    # a "worker" that reads the request and never answers
    workers = app_module.CheckWorkers(1, 0.1, [sys.executable, "-c", READY + "sys.stdin.readline(); time.sleep(3600)"])

    async def run():
        stuck = await workers.check(1, "1")
        killed = workers._idle == []
        await workers.close()
        return stuck, killed

    stuck, killed = asyncio.run(run())
    assert stuck["correct"] is False and "was stopped" in stuck["reason"] and killed


def test_a_dying_worker_scores_zero_and_is_replaced(app_module):
    workers = app_module.CheckWorkers(1, 5, [sys.executable, "-c", READY + "sys.stdin.readline(); sys.exit(3)"])

    async def run():
        first = await workers.check(1, "1")
        second = await workers.check(1, "1")
        await workers.close()
        return first, second, workers.started

    first, second, started = asyncio.run(run())
    assert "worker process died" in first["reason"] and "worker process died" in second["reason"] and started == 2


def test_shipped_rows_are_checkable(app_module, check):
    """Each row of the math benchmarks: its expected answer checks against itself, boxed."""
    root = HERE.parents[1] / "benchmarks"
    for name in ("gsm8k", "math-500"):
        for line in (root / name / "data" / f"{name}_subset.jsonl").read_text().splitlines():
            row = json.loads(line)
            assert check.check_answer(row["expected_answer"], rf"\boxed{{{row['expected_answer']}}}")["correct"], row
