"""The coding agent's mid-episode checkpoints: saved every N steps under the collector's rollout;
a rerun of that rollout goes on from the saved step with the saved transcript (the model sees
what it did before); no rollout named or `checkpoint_every: 0`, no checkpoints. The rollout's
name: sent by the collector, kept across --resume, handed down every hop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gym_compose.collect import dispatch
from gym_compose.collect.progress import ProgressTracker, run_id_for
from gym_compose.sandbox.types import SandboxError, SandboxExecResult
from gym_compose.server import rollout_identity
from gym_compose.server.agents.coding_agent import CodingAgent
from gym_compose.server.agents.coding_tools import ToolLimits, ToolRunner
from gym_compose.server.agents.episode_checkpoints import EpisodeCheckpoints, EpisodeState

ROW = {"responses_create_params": {"input": "fix it"}}


class Broker:
    """The broker's checkpoints, in memory: key -> (files, state)."""

    def __init__(self) -> None:
        self.saved: dict[str, tuple[dict[str, str], Any]] = {}
        self.fail_saves = False


class Sandbox:
    """Files in a dict; `echo TEXT >> FILE` appends, `cat FILE` reads."""

    def __init__(self, broker: Broker) -> None:
        self.broker, self.files = broker, {}
        self.sandbox_id = "sbx-1"

    async def exec(self, command: str, **_: Any) -> SandboxExecResult:
        verb, _, rest = command.partition(" ")
        if verb == "echo":
            text, _, path = rest.partition(" >> ")
            self.files[path] = self.files.get(path, "") + text + "\n"
            return SandboxExecResult(stdout="", stderr="", return_code=0)
        return SandboxExecResult(stdout=self.files.get(rest, ""), stderr="", return_code=0)

    async def checkpoint(self, key: str, state: Any) -> None:
        if self.broker.fail_saves:
            raise SandboxError("503: max_snapshots")
        self.broker.saved[key] = (dict(self.files), json.loads(json.dumps(state)))

    async def restore_checkpoint(self, key: str) -> Any:
        if key not in self.broker.saved:
            return None
        files, state = self.broker.saved[key]
        self.files = dict(files)
        return state

    async def forget_checkpoint(self, key: str) -> bool:
        return self.broker.saved.pop(key, None) is not None


def agent_with(script: list[str], seen: list[list[Any]], fail_at: int | None = None, **config) -> CodingAgent:
    """A coding agent whose model runs `script` (one bash command per turn, then submit) by the
    assistant turns already in its input, recording each input; it raises at turn `fail_at`."""
    agent = CodingAgent(config={"name": "coder", "resources_server": {"type": "resources_servers", "name": "swe"},
                                "model_server": {"type": "responses_api_models", "name": "m"}, **config})

    async def model_turn(params: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        history = params["input"]
        seen.append(history)
        turn = sum(1 for item in history if item.get("type") == "function_call")
        if turn == fail_at:
            raise ConnectionError("the model went away")
        call = ({"name": "bash", "arguments": json.dumps({"command": script[turn]})} if turn < len(script)
                else {"name": "submit", "arguments": "{}"})
        return {"output": [{"type": "function_call", "call_id": f"c{turn}", **call}],
                "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}

    agent._model_turn = model_turn  # type: ignore[method-assign]
    return agent


def episode(agent: CodingAgent, sandbox: Sandbox, rollout: str | None) -> tuple[Any, EpisodeCheckpoints]:
    async def run():
        if rollout:
            rollout_identity.adopt_from_scope({"headers": [(b"x-gym-rollout", rollout.encode())]})
        runner = ToolRunner(sandbox, ToolLimits(60.0, 10_000, "/app"))
        checkpoints = EpisodeCheckpoints.for_rollout(agent.config.name, sandbox, agent.config.checkpoint_every)
        resumed = await checkpoints.resume()
        result = await agent.run_episode(ROW, runner, None, resumed, checkpoints)
        await checkpoints.forget()
        return (result, resumed, runner), checkpoints

    return asyncio.run(run())


SCRIPT = ["echo one >> log", "echo two >> log", "cat log", "echo four >> log"]


def test_a_rerun_goes_on_from_the_last_checkpoint_with_its_files_and_transcript():
    broker, seen = Broker(), []
    crashing = agent_with(SCRIPT, seen, fail_at=3, checkpoint_every=2)
    with pytest.raises(ConnectionError):
        episode(crashing, Sandbox(broker), "run1/0/0")
    (files, state), = broker.saved.values()
    assert list(broker.saved) == ["coder/run1/0/0"] and state["step"] == 2 and files == {"log": "one\ntwo\n"}

    seen.clear()
    resumer = agent_with(SCRIPT, seen, checkpoint_every=2)
    ((reply, steps, submitted), resumed, runner), checkpoints = episode(resumer, Sandbox(broker), "run1/0/0")
    assert resumed.step == 2 and steps == 5 and submitted
    # the model's first input holds the two steps it took before the crash
    assert [item["call_id"] for item in seen[0] if item.get("type") == "function_call"] == ["c0", "c1"]
    outputs = [item["output"] for item in reply["output"] if item["type"] == "function_call_output"]
    assert outputs == ["exit code 0", "exit code 0", "exit code 0\none\ntwo", "exit code 0", "submitted"]
    assert reply["usage"]["total_tokens"] == 10 and runner.commands == 4  # the saved steps' count with them
    assert checkpoints.saved == 1 and broker.saved == {}  # saved at step 4, forgotten at the end


def test_no_rollout_named_or_no_interval_means_no_checkpoints():
    for rollout, every in ((None, 1), ("run1/0/0", 0)):
        broker, seen = Broker(), []
        ((_, steps, _), resumed, _), checkpoints = episode(agent_with(SCRIPT, seen, checkpoint_every=every),
                                                          Sandbox(broker), rollout)
        assert steps == 5 and resumed is None and checkpoints.key is None and checkpoints.saved == 0


def test_a_checkpoint_that_cannot_be_saved_leaves_the_episode_going():
    broker = Broker()
    broker.fail_saves = True
    ((_, steps, submitted), _, _), checkpoints = episode(agent_with(SCRIPT, [], checkpoint_every=1),
                                                        Sandbox(broker), "run1/1/0")
    assert steps == 5 and submitted and checkpoints.failures == 4 and checkpoints.saved == 0


def test_a_checkpoint_with_someone_elses_state_is_refused():
    broker = Broker()
    broker.saved["coder/run1/2/0"] = ({}, {"not": "an episode"})
    with pytest.raises(SandboxError, match="holds no episode state this agent wrote"):
        episode(agent_with(SCRIPT, [], checkpoint_every=1), Sandbox(broker), "run1/2/0")
    assert EpisodeState.from_saved({"step": 3, "items": []}) == EpisodeState(step=3)


def test_the_rollout_is_named_by_the_run_folder_kept_across_resume(tmp_path):
    first = run_id_for(tmp_path, resume=False)
    ProgressTracker(tmp_path, total=1, run_id=first).write()
    assert run_id_for(tmp_path, resume=True) == first
    assert run_id_for(tmp_path, resume=False) != first  # a new run in the folder is another run
    (tmp_path / "progress.json").write_text("{torn")
    assert run_id_for(tmp_path, resume=True).isalnum()
    assert dispatch.rollout_id(first, {"_ng_task_index": 3, "_ng_rollout_index": 1}) == f"{first}/3/1"


def test_the_rollout_is_handed_down_with_each_call_to_a_peer():
    async def one_hop(headers):
        rollout_identity.adopt_from_scope({"headers": headers})
        return rollout_identity.rollout_headers()

    assert asyncio.run(one_hop([(b"X-Gym-Rollout", b"abc/1/0")])) == {"x-gym-rollout": "abc/1/0"}
    assert asyncio.run(one_hop([])) == {}
    assert asyncio.run(one_hop([(b"x-gym-rollout", b"a\x01b")])) == {}  # not printable: none
