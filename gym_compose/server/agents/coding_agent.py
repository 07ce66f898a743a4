"""coding_agent: a built-in agent that works a task inside the session's sandbox.

    /run: seed the resources server (it leases the task's sandbox and hands it over in
          `sandbox_descriptor`, NeMo Gym's way), connect to that sandbox, then loop: model ->
          tool calls (bash, str_replace_editor, submit; gym_compose.server.agents.coding_tools) ->
          model, until the model calls submit, answers without a tool call, or max_steps; then
          verify. The trajectory is the response's `output`: every function_call and its
          function_call_output, as NeMo Gym's agents record them.

The model is any OpenAI-compatible server behind the model server: `api_mode: responses` posts
`/v1/responses`, `chat_completions` posts `/v1/chat/completions` (converted both ways). A sandbox
that dies fails the rollout naming it, after the resources server was told to give it back.
With `checkpoint_every: N` it saves a checkpoint every N steps, from which a rerun of the same
rollout (`--resume` after a crash) goes on (episode_checkpoints.py).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Optional

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from gym_compose.net.web import json_response
from gym_compose.server.agents.agent_cost import AgentLedger, with_agent_cost
from gym_compose.server.agents.coding_tools import SUBMIT, TOOLS, ToolLimits, ToolRunner
from gym_compose.server.agents.common import (
    TASK_HEADER,
    as_input_list,
    close_session,
    global_config_of,
    model_reads_task_header,
    run_row_endpoint,
    task_header,
)
from gym_compose.server.agents.episode_checkpoints import EpisodeCheckpoints, EpisodeState
from gym_compose.server.aggregation import aggregate_metrics_forwarding_route
from gym_compose.server.base import BaseServer, BaseServerConfig, ServerRef
from gym_compose.server.models.chat_conversion import chat_to_response, responses_to_chat
from gym_compose.server.responses_api import add_usage

LOG = logging.getLogger("gym_compose.server.coding_agent")
API_MODES = ("responses", "chat_completions")
# What the mock model's scripted mode needs of a row (the whole row can be 100 KB of scripts).
MOCK_TASK_FIELDS = ("instance_id", "patch")
DEFAULT_INSTRUCTIONS = (
    "You are a software engineer working in a code repository at /app, inside a sandbox. Use the bash tool "
    "to explore and run commands and the str_replace_editor tool to change files. Do not change the tests. "
    "When your change is complete, call the submit tool."
)


class CodingAgentConfig(BaseServerConfig):
    resources_server: ServerRef
    model_server: ServerRef
    max_steps: int = 50
    command_timeout_s: float = 60.0
    max_output_chars: int = 10_000
    api_mode: str = "responses"
    instructions: Optional[str] = DEFAULT_INSTRUCTIONS  # used when the row's create params carry none
    workdir: str = "/app"
    checkpoint_every: int = 0  # steps between mid-episode checkpoints (0: none; episode_checkpoints.py)


class NoSandbox(RuntimeError):
    """The resources server's /seed_session handed over no sandbox."""


class CodingAgent(BaseServer):
    config: CodingAgentConfig

    def setup_webserver(self) -> Starlette:
        if self.config.api_mode not in API_MODES:
            raise ValueError(f"coding_agent api_mode must be one of {', '.join(API_MODES)}, "
                             f"not {self.config.api_mode!r}")
        return Starlette(routes=[
            Route("/run", self._run_endpoint, methods=["POST"]),
            Route("/v1/responses", self._responses_endpoint, methods=["POST"]),
            aggregate_metrics_forwarding_route(self, self.config.resources_server.name),
        ])

    async def _run_endpoint(self, request: Request):
        return await run_row_endpoint(request, self.run)

    async def _responses_endpoint(self, request: Request):
        return json_response({"error": "coding_agent works a task in the sandbox its resources server leases: "
                                       "post a dataset row to /run"}, 400)

    async def run(self, row: dict[str, Any], cookies: dict[str, str]) -> dict[str, Any]:
        resources = self.config.resources_server.name
        ledger = AgentLedger()
        began = time.monotonic()
        seed, raw = await self.server_client.post_json(resources, "/seed_session", json=row, cookies=cookies)
        cookies = {**cookies, **raw.cookies}
        seeded = time.monotonic()
        ledger.phase_done("seed")
        try:
            sandbox = await self._connect(seed)
            try:
                runner = ToolRunner(sandbox, ToolLimits(self.config.command_timeout_s, self.config.max_output_chars,
                                                        (seed or {}).get("workdir") or self.config.workdir))
                checkpoints = EpisodeCheckpoints.for_rollout(self.config.name, sandbox, self.config.checkpoint_every)
                resumed = await checkpoints.resume()
                response, steps, submitted = await self.run_episode(row, runner, ledger, resumed, checkpoints)
                await checkpoints.forget()  # the episode is whole: a rerun from here would start afresh
            finally:
                await sandbox.disconnect()
        except BaseException:  # the sandbox goes back now, not when the verifier's idle reaper finds it
            await close_session(self.server_client, resources, cookies)
            raise
        episode_done = time.monotonic()
        ledger.phase_done("episode")
        verified, _ = await self.server_client.post_json(resources, "/verify", json={**row, "response": response},
                                                         cookies=cookies)
        ledger.phase_done("verify")
        agent_timings = {"seed_s": round(seeded - began, 3), "agent_s": round(episode_done - seeded, 3),
                         "verify_s": round(time.monotonic() - episode_done, 3),
                         "total_s": round(time.monotonic() - began, 3)}
        resumed_at = {"agent_resumed_from_step": resumed.step} if resumed else {}
        saved = {"agent_checkpoints": checkpoints.saved, "agent_checkpoint_failures": checkpoints.failures} \
            if checkpoints.key else {}
        return {**row, **with_agent_cost(verified, ledger, always=True), "agent_steps": steps,
                "agent_submitted": submitted, "agent_commands": runner.commands,
                "agent_command_timeouts": runner.timeouts, "agent_timings": agent_timings, **resumed_at, **saved}

    async def _connect(self, seed: Any):
        from gym_compose.sandbox import AsyncSandbox

        descriptor = seed.get("sandbox_descriptor") if isinstance(seed, dict) else None
        if not isinstance(descriptor, dict) or not descriptor.get("sandbox_id"):
            if isinstance(seed, dict) and seed.get("sandbox_handle"):
                # NeMo Gym's harness agents connect to a bare id; the broker lets another server into
                # a sandbox only with the grant its owner's descriptor carries (sandbox/tokens.py)
                raise NoSandbox(f"{self.config.resources_server.name} handed over only a sandbox_handle in "
                                "/seed_session, an id without the grant that lets another server use its sandbox; "
                                "coding_agent needs the sandbox_descriptor of the sandbox's serialize()")
            raise NoSandbox(f"{self.config.resources_server.name} handed over no sandbox in /seed_session "
                            "(sandbox_descriptor); coding_agent needs a resources server that leases one per session")
        return await AsyncSandbox.connect(descriptor)

    async def run_episode(self, row: dict[str, Any], runner: ToolRunner, ledger: Optional[AgentLedger] = None,
                          resumed: Optional[EpisodeState] = None, checkpoints: Optional[EpisodeCheckpoints] = None,
                          ) -> tuple[dict[str, Any], int, bool]:
        """Model turns and tool calls until submit, an answer without a tool call, or max_steps;
        from a checkpoint's state when `resumed`, saving one after a step when `checkpoints` asks."""
        params = dict(row["responses_create_params"])
        params["tools"] = [*[t for t in params.get("tools") or [] if t.get("name") not in {x["name"] for x in TOOLS}],
                           *TOOLS]
        if not params.get("instructions") and self.config.instructions:
            params["instructions"] = self.config.instructions
        headers = task_header({key: row[key] for key in MOCK_TASK_FIELDS if key in row},
                              model_reads_task_header(global_config_of(self), self.config.model_server.name))
        history = as_input_list(params["input"])
        state = resumed or EpisodeState()
        new_items: list[Any] = list(state.items)
        usage, reply, steps, submitted = state.usage, {}, state.step, False
        runner.commands, runner.timeouts = runner.commands + state.commands, runner.timeouts + state.timeouts
        while steps < self.config.max_steps and not submitted:
            steps += 1
            turn = self._model_turn({**params, "input": history + new_items}, headers)
            reply = await (ledger.model_call(turn) if ledger else turn)
            output = reply.get("output") or []
            new_items.extend(output)
            usage = add_usage(usage, reply.get("usage"))
            calls = [item for item in output if item.get("type") == "function_call"]
            if reply.get("incomplete_details") or not calls:
                break
            for call in calls:
                name = str(call.get("name") or "")
                try:
                    arguments = orjson.loads(call.get("arguments") or "{}")
                except orjson.JSONDecodeError as error:
                    result = f"error: the arguments are not valid JSON: {error}"
                else:
                    result = await runner.run(name, arguments if isinstance(arguments, dict) else {})
                new_items.append({"type": "function_call_output", "call_id": call.get("call_id"), "output": result})
                submitted = submitted or name == SUBMIT
            if checkpoints is not None and not submitted and steps < self.config.max_steps:
                await checkpoints.after_step(EpisodeState(steps, new_items, usage, runner.commands, runner.timeouts))
        reply = {**reply, "output": new_items, "usage": usage}
        return reply, steps, submitted

    async def _model_turn(self, params: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        model = self.config.model_server.name
        if self.config.api_mode == "responses":
            reply, _ = await self.server_client.post_json(model, "/v1/responses", json=params, headers=headers)
            return reply
        chat = responses_to_chat(params, str(params.get("model") or ""))
        completion, _ = await self.server_client.post_json(model, "/v1/chat/completions", json=chat, headers=headers)
        return chat_to_response(completion, params)


__all__ = ["CodingAgent", "CodingAgentConfig", "TASK_HEADER"]
