"""math_answer: the reward is whether the model's final answer equals the expected one, checked
with math-verify (symbolic equivalence: `\\frac{1}{2}`, `0.5` and `1/2` are one answer).

The final answer is the last `\\boxed{...}` of the model's last message, else the last number in
it. Rows carry `question` and `expected_answer` (NeMo Gym's math rows, e.g. of math_with_judge).
The check runs in worker processes (`python answer_check.py`, one JSON line per check), never on
the server's event loop: math-verify's SymPy calls can take long, and its own time limits
(SIGALRM) work only in a process's main thread. A worker still busy after
`verifier_timeout_seconds` (plus a margin) is killed and replaced; that rollout scores 0.0 with
the reason in `failure_reason`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Optional, Union

from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from pydantic import Field, PrivateAttr

CHECKER = Path(__file__).resolve().with_name("answer_check.py")


class MathAnswerConfig(BaseResourcesServerConfig):
    verifier_timeout_seconds: float = Field(10.0, gt=0)
    verifier_workers: int = Field(2, ge=1)
    # a worker's start: Python plus SymPy's import, seconds on a busy machine
    verifier_start_timeout_seconds: float = Field(300.0, gt=0)


class CheckerStartError(RuntimeError):
    """A checker process that exited or stayed silent before saying it was ready: the server's fault,
    not the model's, so /verify fails (the rollout becomes a failure row) instead of scoring 0."""


class MathVerifyRequest(BaseVerifyRequest):
    question: Optional[str] = None
    expected_answer: Union[str, int, float]


class MathVerifyResponse(MathVerifyRequest, BaseVerifyResponse):
    extracted_answer: Optional[str] = None
    extraction: Optional[str] = None  # "boxed", "last_number", or None: no answer found


def final_text(response: Any) -> str:
    """The text of the response's last assistant message (reasoning and tool calls left out)."""
    text = ""
    for item in response.output:
        if item.type == "message" and getattr(item, "role", "assistant") == "assistant":
            content = item.content
            text = content if isinstance(content, str) else "".join(getattr(part, "text", "") for part in content)
    return text


class CheckWorkers:
    """At most `size` checker processes; each takes one check at a time and is reused."""

    def __init__(self, size: int, timeout_s: float, command: list[str], start_timeout_s: float = 300.0):
        self.size, self.timeout_s, self.command, self.start_timeout_s = size, timeout_s, command, start_timeout_s
        self._idle: list[asyncio.subprocess.Process] = []
        self._slots = asyncio.Semaphore(size)
        self.started = 0  # processes started so far (a killed one is replaced)

    async def start_all(self) -> None:
        """Start every worker now (each imports SymPy once), so the first checks do not wait for it."""
        workers = await asyncio.gather(*(self._start() for _ in range(self.size - len(self._idle))))
        self._idle.extend(workers)

    async def _start(self) -> asyncio.subprocess.Process:
        self.started += 1
        worker = await asyncio.create_subprocess_exec(*self.command, stdin=asyncio.subprocess.PIPE,
                                                      stdout=asyncio.subprocess.PIPE)
        try:
            line = await asyncio.wait_for(worker.stdout.readline(), self.start_timeout_s)
        except asyncio.TimeoutError:
            line = b""
        if not line.startswith(b'{"ready"'):
            if not line:  # end of output: the worker is exiting; let it, so its exit code is its own
                try:
                    await asyncio.wait_for(worker.wait(), 5)
                except asyncio.TimeoutError:
                    pass
            await self._discard(worker)
            raise CheckerStartError(f"the answer-check worker {' '.join(self.command)} did not start within "
                                    f"{self.start_timeout_s:g} s (exit code {worker.returncode}; see the server's log)")
        return worker

    async def _take(self) -> asyncio.subprocess.Process:
        while self._idle:
            worker = self._idle.pop()
            if worker.returncode is None:
                return worker
        return await self._start()

    async def check(self, expected: Any, text: str) -> dict[str, Any]:
        request = json.dumps({"expected": expected, "text": text, "timeout_s": self.timeout_s}) + "\n"
        # math-verify stops itself after timeout_s (parse, then verify); the margin covers a SymPy
        # call that does not return to the interpreter in time
        deadline = self.timeout_s * 2 + 5
        async with self._slots:
            worker = await self._take()
            try:
                worker.stdin.write(request.encode())
                await worker.stdin.drain()
                line = await asyncio.wait_for(worker.stdout.readline(), deadline)
            except asyncio.TimeoutError:
                await self._discard(worker)
                return {"correct": False, "reason": f"the answer check ran past {deadline:g} s and was stopped"}
            except (BrokenPipeError, ConnectionResetError):
                line = b""
            if not line:
                await self._discard(worker)
                return {"correct": False, "reason": "the answer check's worker process died"}
            self._idle.append(worker)
            return json.loads(line)

    @staticmethod
    async def _discard(worker: asyncio.subprocess.Process) -> None:
        if worker.returncode is None:
            worker.kill()
        await worker.wait()  # SIGKILL: prompt

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for worker in idle:
            await self._discard(worker)


class MathAnswerServer(SimpleResourcesServer):
    config: MathAnswerConfig
    _workers: Optional[CheckWorkers] = PrivateAttr(default=None)

    def workers(self) -> CheckWorkers:
        if self._workers is None:
            self._workers = CheckWorkers(self.config.verifier_workers, self.config.verifier_timeout_seconds,
                                         [sys.executable, str(CHECKER)], self.config.verifier_start_timeout_seconds)
        return self._workers

    async def on_startup(self) -> None:
        await super().on_startup()
        await self.workers().start_all()  # the server serves (and is ready) once the checks run at full speed

    async def on_shutdown(self) -> None:
        if self._workers is not None:
            await self._workers.close()
        await super().on_shutdown()

    async def verify(self, body: MathVerifyRequest) -> MathVerifyResponse:
        result = await self.workers().check(body.expected_answer, final_text(body.response))
        return MathVerifyResponse(**body.model_dump(), reward=float(result["correct"]),
                                  extracted_answer=result.get("extracted_answer"),
                                  extraction=result.get("extraction"), failure_reason=result.get("reason"))


if __name__ == "__main__":
    MathAnswerServer.run_webserver()
