"""The mock model's oracle and adversary on each kind of task the shipped benchmarks hold."""

import json
from pathlib import Path

import pytest

from gym_compose.server.models.mock_model import PLAIN_ANSWER, asks_for_boxed, plan_turn, tagged_replies

REPO = Path(__file__).resolve().parents[2]
TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"properties": {"city": {"type": "string"}}}}]


def text(turn, task, mode, boxed=False, tools=(), metadata=None):
    return plan_turn(turn, list(tools), "auto", metadata or {}, task, mode, boxed=boxed).text


def test_the_answer_is_boxed_when_the_prompt_asks_for_it():
    task = {"expected_answer": r"\frac{1}{2}"}
    assert text(0, task, "oracle", boxed=True) == r"The final answer is $\boxed{\frac{1}{2}}$."
    assert text(0, task, "oracle") == r"\frac{1}{2}"
    assert text(0, task, "adversary", boxed=True) == r"The final answer is $\boxed{-7919}$."
    assert text(0, {"expected_answer": 18}, "adversary", boxed=True) == r"The final answer is $\boxed{19}$."
    assert text(0, task, "adversary") == r"not \frac{1}{2}"


def test_the_prompt_asks_for_a_boxed_answer_in_any_message_shape():
    assert asks_for_boxed([{"role": "user", "content": r"Put it in \boxed{}."}])
    assert asks_for_boxed([{"role": "system", "content": [{"type": "input_text", "text": r"use \boxed{}"}]}])
    assert not asks_for_boxed([{"role": "assistant", "content": r"\boxed{1}"}, {"role": "user", "content": "hi"}])


def test_the_adversary_calls_no_tool_and_the_oracle_does():
    assert plan_turn(0, TOOLS, "auto", {}, {}, "oracle").calls == [("get_weather", {"city": "city"})]
    adversary = plan_turn(0, TOOLS, "auto", {}, {}, "adversary")
    assert adversary.calls == [] and adversary.text == PLAIN_ANSWER


def test_a_code_task_gets_the_reference_program_or_a_stub():
    task = {"prompt": "def f(x):\n    \"\"\"Twice x.\"\"\"\n", "canonical_solution": "    return 2 * x\n"}
    assert text(0, task, "oracle") == "```python\ndef f(x):\n    \"\"\"Twice x.\"\"\"\n    return 2 * x\n```"
    assert text(0, task, "adversary") == "```python\ndef f(x):\n    \"\"\"Twice x.\"\"\"\n    return None\n```"


def test_a_game_is_played_move_by_move():
    task = {"expected_actions": ["hit", "stand"], "wrong_actions": ["hit"]}
    assert [text(turn, task, "oracle") for turn in range(3)] == ["hit", "stand", "stand"]
    assert [text(turn, task, "adversary") for turn in range(3)] == ["hit", "hit", "hit"]
    assert text(0, {"expected_actions": ["7"]}, "adversary") == "8"


SOKOBAN = [{"role": "system", "content": "Symbols: #=wall. Reply with exactly one move each turn using one of "
                                      "<action>Up</action>, <action>Down</action>, <action>Left</action>, or "
                                      "<action>Right</action>."},
           {"role": "user", "content": "Solve the Sokoban puzzle step by step."}]


def test_with_no_answer_known_the_oracle_replies_in_the_tagged_form_the_prompt_offers_turn_by_turn():
    replies = tagged_replies(SOKOBAN)
    assert replies == ("<action>Up</action>", "<action>Down</action>", "<action>Left</action>", "<action>Right</action>")
    played = [plan_turn(turn, [], "auto", {}, {}, "oracle", replies=replies).text for turn in range(5)]
    assert played == [*replies, "<action>Up</action>"]
    # an answer the task gives still wins; adversary and plain do not play along
    assert plan_turn(0, [], "auto", {}, {"expected_actions": ["hit"]}, "oracle", replies=replies).text == "hit"
    assert plan_turn(0, [], "auto", {}, {}, "adversary", replies=replies).text == PLAIN_ANSWER
    assert plan_turn(0, [], "auto", {}, {}, "plain", replies=replies).text == PLAIN_ANSWER


def test_only_two_or_more_options_of_one_tag_in_one_prompt_text_are_a_reply_form():
    assert tagged_replies([{"role": "user", "content": "Wrap it: <answer>x</answer>."}]) == ()
    assert tagged_replies([{"role": "system", "content": "<a>1</a> then <b>2</b>"}]) == ()
    assert tagged_replies([{"role": "assistant", "content": "<action>Up</action> <action>Down</action>"}]) == ()
    later = [*SOKOBAN, {"role": "user", "content": "Now <move>L</move> or <move>R</move>."}]
    assert tagged_replies(later) == ("<move>L</move>", "<move>R</move>")  # the latest instruction wins
    parts = [{"role": "user", "content": [{"type": "input_text", "text": "<c>a</c> <c>b</c> <c>a</c>"}]}]
    assert tagged_replies(parts) == ("<c>a</c>", "<c>b</c>")


def test_a_row_script_and_a_row_mode_still_win():
    script = {"gym_mock_script": json.dumps([{"text": "scripted"}])}
    assert text(0, {"expected_answer": 1}, "oracle", metadata=script) == "scripted"
    assert text(0, {"expected_answer": 1}, "oracle", metadata={"gym_mock_mode": "adversary"}) == "2"


@pytest.mark.parametrize("rows", ["gsm8k/data/gsm8k_subset.jsonl", "math-500/data/math-500_subset.jsonl",
                                  "human_eval/data/human_eval_subset.jsonl", "blackjack/data/blackjack_subset.jsonl"])
def test_every_shipped_row_gives_the_oracle_an_answer(rows):
    for line in (REPO / "benchmarks" / rows).read_text().splitlines():
        task = {key: value for key, value in json.loads(line).items() if key != "responses_create_params"}
        for mode in ("oracle", "adversary"):
            assert text(0, task, mode, boxed=True) != PLAIN_ANSWER
