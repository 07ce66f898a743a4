"""python_tests: the reward is whether the model's Python program passes the task's hidden tests,
run in a sandbox (no network, bounded processes, memory and time), never in this server's process.

Rows are HumanEval's (`task_id`, `prompt`, `entry_point`, `test`; `canonical_solution` unused
here). The program is the last ```python (or plain ```) block of the model's last message, else
the whole message, placed after the task's prompt (so a bare function body completes it, and a
whole function replaces the prompt's stub). Each /verify leases a sandbox from the warm pool,
writes the harness (`harness.py`: the candidate runs in its own process and never holds the tests)
and the job into it, runs it once and gives the sandbox back (it is destroyed, never reused).

Reward 1.0 iff every test passed. Otherwise 0.0 with `outcome` and `reason` (also in
`failure_reason`): "failed" (a test failed or the program raised), "timeout" (ran past
`test_timeout_s`), "oom" (killed by the memory limit), "no_verdict" (the program took the harness
down with it), "no_code". A sandbox that dies for another reason, or cannot be leased, fails the
rollout instead of scoring it: that is not the program's doing.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any, Optional, Union

from fastapi import Request
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from nemo_gym.global_config import get_global_config_dict
from nemo_gym.sandbox import AsyncSandbox, SandboxSpec, create_provider
from nemo_gym.sandbox.config import resolve_provider_config
from nemo_gym.server_utils import SESSION_ID_KEY
from pydantic import Field, PrivateAttr

HARNESS = Path(__file__).resolve().with_name("harness.py").read_text(encoding="utf-8")
OUTER_MARGIN_S = 60.0  # two interpreter start-ups on a busy machine, on top of the program's own limit
FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)


class PythonTestsConfig(BaseResourcesServerConfig):
    sandbox_provider: Union[str, dict, None] = None
    sandbox_config: dict[str, Any] = Field(default_factory=dict)
    test_timeout_s: float = 15.0  # the program's time: loading it and every test call (not interpreter start-up)
    # test runs at once (each a sandbox with two Python processes); more wait their turn, so that
    # contention does not eat into the programs' time limits. Default: twice the server's CPUs.
    max_concurrent_tests: int = 0


class PythonTestsVerifyRequest(BaseVerifyRequest):
    task_id: Optional[str] = None
    prompt: str
    entry_point: str
    test: str


class PythonTestsVerifyResponse(PythonTestsVerifyRequest, BaseVerifyResponse):
    outcome: str
    reason: str
    program: Optional[str] = None


class SandboxFailure(RuntimeError):
    """The sandbox died of something else than the program's memory, or could not be leased."""


def final_text(response: Any) -> str:
    text = ""
    for item in response.output:
        if item.type == "message" and getattr(item, "role", "assistant") == "assistant":
            content = item.content
            text = content if isinstance(content, str) else "".join(getattr(part, "text", "") for part in content)
    return text


def extract_code(text: str) -> Optional[str]:
    """The last ```python block (else the last ``` block of any language), else the whole text."""
    blocks = FENCE.findall(text)
    python = [code for language, code in blocks if language.lower() in ("python", "py", "python3")]
    chosen = python or [code for language, code in blocks if not language]
    if chosen:
        return chosen[-1]
    return text if text.strip() else None


def program_for(prompt: str, code: str, entry_point: str) -> str:
    """The prompt (its imports and helpers) then the code: a whole function redefines the stub, a
    bare body continues it."""
    defines = re.search(rf"^(async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE)
    return prompt + ("\n" + code if defines else code)


def verdict_of(result: Any, limit_s: float) -> tuple[str, str]:
    """(outcome, reason) from the harness's exec result."""
    if result.error_type == "timeout":
        return "timeout", f"the test run ran past {limit_s:g} s and was stopped"
    if result.error_type == "oom":
        return "oom", result.reason or "the program was killed by the sandbox's memory limit"
    if result.error_type == "sandbox":
        reason = result.reason or (result.stderr or "").strip() or "the sandbox failed"
        if "oom" in reason.lower():
            return "oom", reason
        raise SandboxFailure(reason)
    lines = [line for line in (result.stdout or "").splitlines() if line.strip()]
    try:
        verdict = json.loads(lines[-1])
        return verdict.get("outcome") or ("passed" if verdict["passed"] else "failed"), str(verdict["reason"])
    except (IndexError, ValueError, KeyError, TypeError):
        return "no_verdict", (f"the test harness gave no verdict (exit code {result.return_code}): "
                              "the program took it down")


class PythonTestsServer(SimpleResourcesServer):
    config: PythonTestsConfig
    _turns: Optional[asyncio.Semaphore] = PrivateAttr(default=None)

    def _new_sandbox(self) -> AsyncSandbox:
        if not self.config.sandbox_provider:
            return AsyncSandbox()  # gym-compose's broker
        return AsyncSandbox(create_provider(resolve_provider_config(self.config.sandbox_provider,
                                                                    get_global_config_dict())))

    async def run_in_sandbox(self, job: dict[str, Any], session: str) -> tuple[str, str]:
        sandbox = self._new_sandbox()
        try:
            await sandbox.start(SandboxSpec(metadata={"session": session}))
        except Exception as error:
            raise SandboxFailure(f"no sandbox could be leased: {error}") from error
        try:
            if self._turns is None:
                self._turns = asyncio.Semaphore(self.config.max_concurrent_tests or 2 * (os.cpu_count() or 1))
            async with self._turns:  # leases overlap; the runs themselves take turns
                name = secrets.token_hex(8)  # the job file's name is not guessable before it is gone
                await sandbox.write_file("harness.py", HARNESS)
                await sandbox.write_file(f"job-{name}.json", json.dumps(job))
                # the harness keeps the program's time limit itself; this one stops a harness that hangs
                outer = self.config.test_timeout_s + OUTER_MARGIN_S
                result = await sandbox.exec(f"python3 -I harness.py job-{name}.json", timeout_s=outer)
            return verdict_of(result, outer)
        finally:
            await sandbox.stop()

    async def verify(self, request: Request, body: PythonTestsVerifyRequest) -> PythonTestsVerifyResponse:
        code = extract_code(final_text(body.response))
        program = None
        if code is None:
            outcome, reason = "no_code", "the answer holds no program"
        else:
            program = program_for(body.prompt, code, body.entry_point)
            job = {"prompt": body.prompt, "program": program, "test": body.test, "entry_point": body.entry_point,
                   "time_limit_s": self.config.test_timeout_s}
            outcome, reason = await self.run_in_sandbox(job, request.session[SESSION_ID_KEY])
        passed = outcome == "passed"
        return PythonTestsVerifyResponse(**body.model_dump(), reward=float(passed), outcome=outcome, reason=reason,
                                         program=program, failure_reason=None if passed else reason)


if __name__ == "__main__":
    PythonTestsServer.run_webserver()
