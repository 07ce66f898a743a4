"""The mock model's scripted mode for the coding agent: with no model at all, the whole SWE path
(sandbox, tools, diff, verification) runs, through the same tool calls a model would make.

When a request offers the coding agent's tools (bash, str_replace_editor, submit) and the task
(the `x-gym-task` header) carries the row's reference `patch`:
- oracle: look at the repository, write the reference patch to a file with the editor, apply it
  with `git apply`, submit: the verifier should score 1.0;
- adversary: look, append a comment line to the first file the reference patch changes (a change
  that applies but fixes nothing), submit: 0.0;
- plain: submit without changing anything: 0.0.
A row's own `gym_mock_script` turns come first; these steps follow them.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Optional

from gym_compose.server.agents.coding_tools import BASH, EDITOR, SUBMIT, TOOL_NAMES

PATCH_FILE = "/tmp/gym-mock-reference.diff"
LOOK = "git status --short && git log --oneline -1"


def offers_coding_tools(tool_names: set[str]) -> bool:
    return set(TOOL_NAMES) <= tool_names


def first_changed_file(patch: str) -> Optional[str]:
    match = re.search(r"^\+\+\+ b/(\S+)", patch, re.MULTILINE)
    return match.group(1) if match else None


def swe_steps(mode: str, patch: str) -> list[list[tuple[str, dict[str, Any]]]]:
    """The turns of a mode: each a list of (tool, arguments)."""
    if mode == "oracle":
        return [[(BASH, {"command": LOOK})],
                [(EDITOR, {"command": "create", "path": PATCH_FILE, "file_text": patch})],
                [(BASH, {"command": f"git apply --whitespace=nowarn {PATCH_FILE} && rm {PATCH_FILE} "
                                    "&& git status --short"})],
                [(SUBMIT, {})]]
    if mode == "adversary":
        target = first_changed_file(patch) or "README.md"
        note = "# gym-compose mock adversary: a change that does not fix the issue"
        return [[(BASH, {"command": LOOK})],
                [(BASH, {"command": f"printf '\\n%s\\n' {shlex.quote(note)} >> {shlex.quote(target)}"})],
                [(SUBMIT, {})]]
    return [[(SUBMIT, {})]]


def swe_turn(turn: int, mode: str, task: dict[str, Any]) -> Optional[list[tuple[str, dict[str, Any]]]]:
    """The tool calls of turn `turn`, or None past the script (the mock then answers in text)."""
    patch = task.get("patch")
    if not isinstance(patch, str):
        return None
    steps = swe_steps(mode, patch)
    return steps[turn] if 0 <= turn < len(steps) else None
