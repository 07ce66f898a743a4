"""The coding agent's tools, run in the task's sandbox: `bash` (a shell command), `str_replace_editor`
(view, create, replace, insert in files) and `submit` (the work is done).

Every call answers text for the model: a command's exit code and its output, cut to the agent's
`max_output_chars` (head and tail kept, the cut said), or the reason a call could not be done. A
command past its time limit is stopped and says so; the sandbox lives on. A dead sandbox is not
an answer: `SandboxLost` ends the episode and the rollout fails naming the sandbox.
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass
from typing import Any, Optional

BASH, EDITOR, SUBMIT = "bash", "str_replace_editor", "submit"
TOOL_NAMES = (BASH, EDITOR, SUBMIT)
EDITOR_COMMANDS = ("view", "create", "str_replace", "insert")
MAX_FILE_BYTES = 1 << 20

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": BASH, "strict": False,
     "description": "Run a bash command in the repository's sandbox (working folder /app). Each call is a fresh "
                    "shell: cd and variables do not carry over. Long output is cut in the middle; a command "
                    "that runs past the time limit is stopped.",
     "parameters": {"type": "object", "properties": {
         "command": {"type": "string", "description": "the bash command line"},
         "timeout_s": {"type": "number", "description": "optional: a shorter time limit in seconds"}},
         "required": ["command"], "additionalProperties": False}},
    {"type": "function", "name": EDITOR, "strict": False,
     "description": "View or edit a file in the sandbox. view: the file with line numbers (view_range [first, "
                    "last] optional). create: write file_text to path. str_replace: replace old_str, which must "
                    "occur exactly once, by new_str. insert: put new_str after line insert_line (0: at the top). "
                    "Relative paths are under /app.",
     "parameters": {"type": "object", "properties": {
         "command": {"type": "string", "enum": list(EDITOR_COMMANDS)},
         "path": {"type": "string"},
         "file_text": {"type": "string"},
         "old_str": {"type": "string"},
         "new_str": {"type": "string"},
         "insert_line": {"type": "integer"},
         "view_range": {"type": "array", "items": {"type": "integer"}}},
         "required": ["command", "path"], "additionalProperties": False}},
    {"type": "function", "name": SUBMIT, "strict": False,
     "description": "Call when the change is complete: the repository's current state is submitted for grading.",
     "parameters": {"type": "object", "properties": {}, "additionalProperties": False}},
]


class SandboxLost(RuntimeError):
    """The task's sandbox died (OOM-killed, killed, exited) or its broker is unreachable."""


@dataclass(frozen=True)
class ToolLimits:
    command_timeout_s: float = 60.0
    max_output_chars: int = 10_000
    workdir: str = "/app"


def cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


class ToolRunner:
    """Runs tool calls in one sandbox (an AsyncSandbox, own or connected)."""

    def __init__(self, sandbox: Any, limits: ToolLimits):
        self.sandbox, self.limits = sandbox, limits
        self.commands = 0
        self.timeouts = 0

    @property
    def name(self) -> str:
        return str(getattr(self.sandbox, "sandbox_id", None) or "?")

    async def run(self, name: str, arguments: dict[str, Any]) -> str:
        if name == BASH:
            return await self.bash(arguments)
        if name == EDITOR:
            return await self.edit(arguments)
        if name == SUBMIT:
            return "submitted"
        return f"error: unknown tool {name!r}; the tools are {', '.join(TOOL_NAMES)}"

    async def bash(self, arguments: dict[str, Any]) -> str:
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            return "error: `command` (a non-empty string) is required"
        limit = self.limits.command_timeout_s
        asked = arguments.get("timeout_s")
        if isinstance(asked, (int, float)) and not isinstance(asked, bool) and 0 < asked < limit:
            limit = float(asked)
        self.commands += 1
        result = await self.sandbox.exec(command, cwd=self.limits.workdir, timeout_s=limit)
        self._check_alive(result)
        output = (result.stdout or "") + (f"\n[stderr]\n{result.stderr}" if result.stderr else "")
        if result.error_type == "timeout":
            self.timeouts += 1
            head = f"the command ran longer than {limit:g} s and was stopped (exit code {result.return_code})"
        elif result.error_type == "oom":
            head = f"the command was killed by the sandbox's memory limit (exit code {result.return_code})"
        else:
            head = f"exit code {result.return_code}"
        return f"{head}\n{cut(output, self.limits.max_output_chars)}".rstrip("\n")

    async def edit(self, arguments: dict[str, Any]) -> str:
        command, raw_path = arguments.get("command"), arguments.get("path")
        if command not in EDITOR_COMMANDS:
            return f"error: `command` must be one of {', '.join(EDITOR_COMMANDS)}"
        if not isinstance(raw_path, str) or not raw_path.strip():
            return "error: `path` (a file path) is required"
        path = posixpath.normpath(posixpath.join(self.limits.workdir, raw_path))
        if command == "create":
            text = arguments.get("file_text")
            if not isinstance(text, str):
                return "error: create needs `file_text` (a string)"
            made = await self._exec(f"mkdir -p -- {shlex.quote(posixpath.dirname(path))}")
            if made.return_code != 0:
                return f"error: cannot make the folder of {path}: {(made.stderr or '').strip()}"
            return await self._write(path, text) or f"created {path} ({len(text)} characters)"
        content = await self._read(path)
        if content is None:
            return f"error: {path} does not exist or is not a readable file"
        if command == "view":
            return self._view(path, content, arguments.get("view_range"))
        if command == "str_replace":
            old, new = arguments.get("old_str"), arguments.get("new_str", "")
            if not isinstance(old, str) or not old:
                return "error: str_replace needs `old_str` (the exact text to replace)"
            if not isinstance(new, str):
                return "error: `new_str` must be a string"
            count = content.count(old)
            if count != 1:
                return (f"error: old_str occurs {count} times in {path}; it must occur exactly once "
                        "(include more surrounding lines)")
            return await self._write(path, content.replace(old, new, 1)) or f"replaced 1 occurrence in {path}"
        new, line = arguments.get("new_str"), arguments.get("insert_line")
        if not isinstance(new, str) or not isinstance(line, int) or isinstance(line, bool):
            return "error: insert needs `new_str` (a string) and `insert_line` (a line number, 0 for the top)"
        lines = content.splitlines(keepends=True)
        if not 0 <= line <= len(lines):
            return f"error: insert_line must be between 0 and {len(lines)}"
        text = new if new.endswith("\n") else new + "\n"
        if line and not lines[line - 1].endswith("\n"):
            text = "\n" + text
        return await self._write(path, "".join([*lines[:line], text, *lines[line:]])) \
            or f"inserted {len(text.splitlines())} line(s) after line {line} of {path}"

    def _view(self, path: str, content: str, view_range: Any) -> str:
        lines = content.splitlines()
        first, last = 1, len(lines)
        if isinstance(view_range, list) and len(view_range) == 2 and all(isinstance(v, int) for v in view_range):
            first, last = max(1, view_range[0]), (len(lines) if view_range[1] == -1 else min(len(lines), view_range[1]))
        shown = "\n".join(f"{number:6}\t{lines[number - 1]}" for number in range(first, last + 1))
        return cut(f"{path} (lines {first}-{last} of {len(lines)}):\n{shown}", self.limits.max_output_chars)

    async def _exec(self, command: str):
        result = await self.sandbox.exec(command, cwd=self.limits.workdir, timeout_s=self.limits.command_timeout_s)
        self._check_alive(result)
        return result

    async def _read(self, path: str) -> Optional[str]:
        checked = await self._exec(f"test -f {shlex.quote(path)} -a -r {shlex.quote(path)}")
        if checked.return_code != 0:
            return None
        data = await self._files(self.sandbox.read_file(path))
        if len(data) > MAX_FILE_BYTES:
            return None
        return data.decode("utf-8", "replace")

    async def _write(self, path: str, text: str) -> Optional[str]:
        """Write a file; None when done, else the error to show."""
        try:
            await self._files(self.sandbox.write_file(path, text))
        except SandboxLost:
            raise
        except Exception as error:
            return f"error: cannot write {path}: {error}"
        return None

    async def _files(self, operation):
        from gym_compose.sandbox.types import SandboxDeadError

        try:
            return await operation
        except SandboxDeadError as error:
            raise SandboxLost(f"sandbox {self.name} is dead: {error}") from None

    def _check_alive(self, result: Any) -> None:
        if result.error_type == "sandbox":
            raise SandboxLost(f"sandbox {self.name} is dead: "
                              f"{result.reason or (result.stderr or '').strip() or result.error_type}")
