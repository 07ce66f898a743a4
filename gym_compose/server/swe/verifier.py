"""The SWE verifier: a resources server for SWE-bench Pro-format rows (built-in implementation
`swebench_pro`; NeMo Gym 0.7's `resources_servers/swebench_pro` config keys and responses).

    /seed_session  leases a sandbox of the row's image (the repository at /app, at its base commit)
                   and hands it to the agent: {sandbox_handle, sandbox_descriptor, image_provenance}
    /verify        takes the agent's diff from that sandbox (`git diff <base_commit>`, new files
                   included), gives the sandbox back, and scores the diff in a FRESH sandbox of the
                   same image (gym_compose.server.swe.evaluation); reward 1.0 iff resolved
    /close_session gives the session's sandbox back (an agent that gave up)

A sandbox that dies under the agent or the verification fails the rollout naming it (a failure
row), instead of scoring it 0. Reference: docs/swe.md.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from fastapi import Request
from pydantic import ConfigDict, Field, PrivateAttr

from gym_compose.sandbox import AsyncSandbox, SandboxSpec, create_provider, resolve_provider_config
from gym_compose.server.resources import (
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from gym_compose.server.sessions import SESSION_ID_KEY
from gym_compose.server.swe.evaluation import (
    REPOSITORY,
    Evaluation,
    SandboxFailure,
    run_evaluation,
    without_paths,
    workspace_files,
)
from gym_compose.server.swe.swe_row import SWERow, row_image

LOG = logging.getLogger("gym_compose.server.swe")
NOT_USED = ("apply_anti_cheating", "environment_repairs", "image_template_manifest")


class SWEVerifierConfig(BaseResourcesServerConfig):
    image_repository: str = "docker.io/jefzda/sweap-images"
    image_template: Optional[str] = None
    is_verifying_golden_patch: bool = False  # score the row's own patch (a check of the rows and images)
    evaluation_timeout: Optional[float] = 3600.0  # the test command
    verification_attempt_timeout: Optional[float] = 1200.0  # one attempt: sandbox start and evaluation
    verification_total_timeout: Optional[float] = 2700.0  # every attempt of one rollout
    verification_stop_timeout: Optional[float] = 120.0
    inconclusive_verification_retries: int = 2  # a verdict-less evaluation is tried again in a new sandbox
    prefetch_go_modules: bool = False
    max_test_output_chars: int = 100_000
    sandbox_provider: Union[str, dict, None] = None
    sandbox_config: dict[str, Any] = Field(default_factory=dict)


class SWEVerifyRequest(SWERow, BaseVerifyRequest):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class SWEVerifyResponse(SWEVerifyRequest, BaseVerifyResponse):
    image_provenance: dict[str, Any] = Field(default_factory=dict)
    evaluation_completed: bool
    eval_timed_out: bool = False
    resolved: bool
    patch_applied: bool
    eval_sandbox_start_time_taken: float
    patch_verification_time_taken: float
    model_patch: Optional[str]
    test_results: Optional[dict[str, Any]]
    test_output: str
    error: Optional[str]
    log_dir: str = ""
    failed_tests: list[str] = Field(default_factory=list)
    timings: dict[str, float] = Field(default_factory=dict)


@dataclass
class Lease:
    sandbox: AsyncSandbox
    image: str
    pristine_untracked: frozenset[str] = frozenset()
    seeded_at: float = field(default_factory=time.monotonic)
    lease_s: float = 0.0


class SWEVerifier(SimpleResourcesServer):
    config: SWEVerifierConfig
    session_state: dict[str, Lease] = Field(default_factory=dict)  # reaped when idle
    _giving_back: set[asyncio.Task] = PrivateAttr(default_factory=set)

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        for key in NOT_USED:
            if getattr(self.config, key, None):
                print(f"gym-compose: {self.config.name}.{key} is not used by gym-compose's SWE verifier "
                      "(its task images need no such repairs)", file=sys.stderr)

    # -- sandboxes -------------------------------------------------------------------------------

    def _new_sandbox(self) -> AsyncSandbox:
        if not self.config.sandbox_provider:
            return AsyncSandbox()
        from gym_compose.server.runtime import current_context

        return AsyncSandbox(create_provider(resolve_provider_config(self.config.sandbox_provider,
                                                                    current_context().global_config)))

    def _spec(self, row: SWERow, session_id: str, purpose: str, files: Optional[dict[str, str]] = None) -> SandboxSpec:
        declared = self.config.sandbox_config
        return SandboxSpec(image=self.image_of(row), workdir=REPOSITORY, files=files or {},
                           ttl_s=declared.get("ttl_s"), ready_timeout_s=declared.get("ready_timeout_s"),
                           metadata={"session": session_id, "instance_id": row.instance_id[:63], "purpose": purpose},
                           provider_options=self._phase_options(purpose))

    def _phase_options(self, purpose: str) -> dict[str, Any]:
        """The broker's egress phase named like the sandbox's purpose ("agent", "verify"), when the
        server's allow-list declares one (network.egress.phases; docs/sandboxes.md#egress-phases)."""
        network = self.config.sandbox_config.get("network")
        egress = network.get("egress") if isinstance(network, dict) else None
        phases = egress.get("phases") if isinstance(egress, dict) else None
        if self.config.sandbox_provider or not isinstance(phases, dict) or purpose not in phases:
            return {}
        return {"phase": purpose}

    def image_of(self, row: SWERow) -> str:
        return row_image(row, self.config.image_repository, self.config.image_template)

    async def _lease(self, spec: SandboxSpec) -> AsyncSandbox:
        sandbox = self._new_sandbox()
        await sandbox.start(spec)
        return sandbox

    async def _give_back(self, lease: Optional[Lease]) -> None:
        if lease is None:
            return
        try:
            await asyncio.wait_for(lease.sandbox.stop(), self.config.verification_stop_timeout)
        except Exception as error:  # the broker reaps what it could not stop now
            LOG.warning("could not give back sandbox %s: %s", lease.sandbox.sandbox_id, error)

    def _give_back_soon(self, lease: Optional[Lease]) -> None:
        """Give the sandbox back without the rollout waiting: a release costs up to a second (the
        broker reads the sandbox's cost from the engine's stats, which answer on their collector's
        1 s tick), twice per rollout, and nothing here reads that cost. `given_back` waits for them."""
        if lease is None:
            return
        task = asyncio.get_running_loop().create_task(self._give_back(lease))
        self._giving_back.add(task)
        task.add_done_callback(self._giving_back.discard)

    async def given_back(self) -> None:
        """Wait until every sandbox given back with `_give_back_soon` is (each bounded by verification_stop_timeout)."""
        while self._giving_back:
            await asyncio.gather(*self._giving_back, return_exceptions=True)

    async def on_shutdown(self) -> None:
        await self.given_back()
        await super().on_shutdown()

    # -- the protocol ----------------------------------------------------------------------------

    # the routes read the signature (as NeMo Gym's do): a server that needs the session takes the request
    async def seed_session(self, request: Request, body: SWERow) -> dict[str, Any]:  # type: ignore[override]
        session_id = request.session[SESSION_ID_KEY]
        await self._give_back(self.session_state.pop(session_id, None))  # seeded again: start clean
        began = time.monotonic()
        sandbox = await self._lease(self._spec(body, session_id, "agent"))
        lease = Lease(sandbox=sandbox, image=self.image_of(body), lease_s=time.monotonic() - began)
        self.session_state[session_id] = lease
        base = shlex.quote(body.base_commit)  # the image's repository is there already; make sure of it
        listed = await sandbox.exec(f"cd {REPOSITORY} && {{ [ \"$(git rev-parse HEAD)\" = {base} ] || git reset -q "
                                    f"--hard {base} >&2; }} && git ls-files --others --exclude-standard", timeout_s=300)
        if listed.error_type in ("oom", "sandbox"):
            await self._give_back(self.session_state.pop(session_id, None))
            raise SandboxFailure(f"sandbox {sandbox.sandbox_id} of {lease.image}: {listed.reason or listed.stderr}")
        if listed.return_code != 0:
            await self._give_back(self.session_state.pop(session_id, None))
            raise SandboxFailure(f"the repository in sandbox {sandbox.sandbox_id} of {lease.image} cannot be put at "
                                 f"base commit {body.base_commit}: {(listed.stderr or '').strip()[:500]}")
        if listed.return_code == 0:
            lease.pristine_untracked = frozenset(line.strip() for line in (listed.stdout or "").splitlines()
                                                 if line.strip())
        return {"sandbox_handle": sandbox.sandbox_id, "sandbox_descriptor": await sandbox.serialize(),
                "sandbox_provider": self.config.sandbox_provider, "workdir": REPOSITORY,
                "image_provenance": {"image": lease.image, "source_uri": lease.image},
                "lease_time_taken": round(lease.lease_s, 4)}

    async def verify(self, request: Request, body: SWEVerifyRequest) -> SWEVerifyResponse:  # type: ignore[override]
        session_id = request.session[SESSION_ID_KEY]
        lease = self.session_state.pop(session_id, None)
        began = time.monotonic()
        timings: dict[str, float] = {}
        extraction_error = None
        try:
            if self.config.is_verifying_golden_patch:
                patch = body.patch
            elif lease is None:
                patch, extraction_error = "", "this session has no sandbox (seed it with /seed_session first)"
            else:
                patch = await self._agent_patch(lease, body.base_commit)
                timings["extract_s"] = round(time.monotonic() - began, 3)
        finally:
            self._give_back_soon(lease)
        if lease is not None:
            timings["lease_s"] = round(lease.lease_s, 3)
            timings["episode_s"] = round(began - lease.seeded_at, 3)
        evaluation, start_s, verify_s = await self._evaluate(body, patch, session_id)
        timings.update(evaluation.timings, eval_sandbox_start_s=round(start_s, 3), verify_s=round(verify_s, 3),
                       total_s=round(time.monotonic() - began + timings.get("episode_s", 0.0), 3))
        image = self.image_of(body)
        return SWEVerifyResponse(
            **body.model_dump(), reward=float(evaluation.resolved),
            image_provenance={"image": image, "source_uri": image},
            evaluation_completed=evaluation.completed, eval_timed_out=evaluation.timed_out,
            resolved=evaluation.resolved, patch_applied=evaluation.patch_applied,
            eval_sandbox_start_time_taken=round(start_s, 4), patch_verification_time_taken=round(verify_s, 4),
            model_patch=patch or None, test_results=evaluation.test_results, test_output=evaluation.test_output,
            error=extraction_error or evaluation.error, failed_tests=evaluation.failed_required, timings=timings)

    async def _agent_patch(self, lease: Lease, base_commit: str) -> str:
        """The agent's changes against the base commit, new files included, as the bytes git wrote."""
        sandbox = lease.sandbox
        path = f"/tmp/gym-compose-agent-{uuid.uuid4().hex}.diff"
        result = await sandbox.exec(f"umask 077; git -C {REPOSITORY} add -N . && git -C {REPOSITORY} --no-pager diff "
                                    f"--no-color --no-ext-diff {shlex.quote(base_commit)} > {path}", timeout_s=300)
        if result.error_type in ("oom", "sandbox"):
            raise SandboxFailure(f"sandbox {sandbox.sandbox_id} of {lease.image} died before its diff was taken: "
                                 f"{result.reason or (result.stderr or '').strip()}")
        if result.return_code != 0:
            raise SandboxFailure(f"git diff failed in sandbox {sandbox.sandbox_id}: {(result.stderr or '').strip()}")
        patch = (await sandbox.read_file(path)).decode("utf-8", "replace")
        return without_paths(patch, lease.pristine_untracked)

    async def _evaluate(self, row: SWERow, patch: str, session_id: str) -> tuple[Evaluation, float, float]:
        """Attempts in fresh sandboxes until one gives a verdict (or the retries or the budget run out)."""
        files = workspace_files(row, patch, self.config.prefetch_go_modules)
        attempts = 1 + max(self.config.inconclusive_verification_retries, 0)
        total = self.config.verification_total_timeout
        deadline = None if total is None else time.monotonic() + total
        evaluation: Optional[Evaluation] = None
        start_s, verify_s = 0.0, 0.0
        for attempt in range(1, attempts + 1):
            budget = _smaller(self.config.verification_attempt_timeout,
                              None if deadline is None else max(deadline - time.monotonic(), 0.0))
            began = time.monotonic()
            sandbox: Optional[AsyncSandbox] = None
            try:
                async with asyncio.timeout(budget):
                    sandbox = await self._lease(self._spec(row, session_id, "verify", files))
                    start_s = time.monotonic() - began
                    evaluation = await run_evaluation(sandbox, row, self.config.evaluation_timeout,
                                                      self.config.max_test_output_chars)
                    verify_s = time.monotonic() - began - start_s
            except SandboxFailure:
                raise
            except TimeoutError:
                evaluation = Evaluation(False, False, False, None,
                                        error=f"verification attempt {attempt} ran past its {budget:g} s budget")
            except Exception as error:
                evaluation = Evaluation(False, False, False, None, error=f"verification failed: {error}")
            finally:
                if sandbox is not None:
                    self._give_back_soon(Lease(sandbox=sandbox, image=""))
            if evaluation.completed or evaluation.timed_out or attempt == attempts \
                    or (deadline is not None and time.monotonic() >= deadline):
                break
            LOG.warning("verification of %s gave no verdict (%s); trying again in a new sandbox (%d/%d)",
                        row.instance_id, evaluation.error, attempt + 1, attempts)
        assert evaluation is not None  # attempts >= 1
        return evaluation, start_s, verify_s

    async def release_session_value(self, value: Any) -> None:
        await self._give_back(value)


def _smaller(first: Optional[float], second: Optional[float]) -> Optional[float]:
    present = [value for value in (first, second) if value is not None]
    return min(present) if present else None
