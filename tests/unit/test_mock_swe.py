"""The mock model's scripted mode for the coding agent: oracle applies the row's reference patch
through the tools, adversary makes a change that fixes nothing, plain submits as it is; a row's
own script goes first; without the coding tools or a patch the mock is unchanged."""

from __future__ import annotations

import json

import pytest

from gym_compose.server.agents.coding_tools import TOOLS
from gym_compose.server.models.mock_model import MockRequestError, plan_turn
from gym_compose.server.models.mock_swe import PATCH_FILE

PATCH = "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-a\n+b\n"
TASK = {"instance_id": "t", "patch": PATCH}


def turns(mode: str, metadata: dict | None = None, task: dict = TASK, tools=TOOLS, limit: int = 8):
    planned = []
    for turn in range(limit):
        plan = plan_turn(turn, tools, "auto", metadata or {}, task, mode)
        planned.append(plan.calls or plan.text)
        if not plan.calls:
            break
    return planned


def test_oracle_writes_the_reference_patch_applies_it_and_submits():
    planned = turns("oracle")
    assert [calls[0][0] for calls in planned[:4]] == ["bash", "str_replace_editor", "bash", "submit"]
    assert planned[1][0][1] == {"command": "create", "path": PATCH_FILE, "file_text": PATCH}
    assert planned[2][0][1]["command"].startswith(f"git apply --whitespace=nowarn {PATCH_FILE}")


def test_adversary_changes_the_first_file_of_the_patch_without_fixing_it():
    planned = turns("adversary")
    assert [calls[0][0] for calls in planned[:3]] == ["bash", "bash", "submit"]
    assert planned[1][0][1]["command"].endswith(">> pkg/mod.py") and PATCH_FILE not in json.dumps(planned)


def test_plain_submits_at_once_and_the_row_can_choose_the_mode():
    assert turns("plain")[0] == [("submit", {})]
    assert turns("oracle", {"gym_mock_mode": "plain"})[0] == [("submit", {})]
    with pytest.raises(MockRequestError):
        turns("oracle", {"gym_mock_mode": "genius"})


def test_a_rows_own_script_runs_first():
    script = json.dumps([{"tool": "bash", "arguments": {"command": "sleep 1"}}])
    planned = turns("oracle", {"gym_mock_script": script})
    assert planned[0] == [("bash", {"command": "sleep 1"})]
    assert [calls[0][0] for calls in planned[1:5]] == ["bash", "str_replace_editor", "bash", "submit"]


def test_other_tools_or_no_patch_leave_the_mock_as_it_was():
    other = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {}}}}]
    assert turns("oracle", tools=other)[0] == [("lookup", {"q": "q"})]
    assert turns("oracle", task={"expected_answer": "4"})[0][0][0] == "bash"  # first tool, schema arguments
    assert len(turns("oracle", task={"expected_answer": "4"})) == 2


def test_chat_shaped_tools_are_recognised():
    chat_tools = [{"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}} for tool in TOOLS]
    assert turns("oracle", tools=chat_tools)[3] == [("submit", {})]
