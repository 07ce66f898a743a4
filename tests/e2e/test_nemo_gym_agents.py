"""NeMo Gym 0.7's own agents and model server in a gym-compose stack (docs/nemo-gym-runtime.md,
"NeMo Gym's own agents and model servers"), each from NeMo Gym's own config files, unchanged:

- its LangGraph reflection agent (`responses_api_agents/langgraph_agent/configs/langgraph_agent.yaml`,
  flavor reflection_agent.py) in front of citation_if, with the mock model;
- its tool-simulation agent in front of single_step_tool_use_with_argument_comparison, with NeMo
  Gym's own `vllm_model` as policy model talking to gym-compose's fake vLLM on the host.

The code comes from the nemo-gym wheel at test time; the NeMo Gym runtime image is the one the
other NeMo Gym runtime tests build.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest

from tests.fakes.fake_vllm import make_server
from tests.support.e2e import BUILDS_NEMO_GYM_RUNTIME, free_port, gym_compose, labelled

pytestmark = [pytest.mark.docker, BUILDS_NEMO_GYM_RUNTIME]


def eval_run(nemo_gym: Path, name: str, tmp_path: Path, rows: Path, *selectors: str) -> list[dict]:
    done = gym_compose("eval", "run", "-p", name, "--head-port", str(free_port()), "--search-dir", str(nemo_gym),
                       *selectors, "--input", str(rows), cwd=tmp_path, timeout=3000)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert labelled("container", name) == []
    (run_dir,) = (tmp_path / "results").iterdir()
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == len(rows.read_text().splitlines())
    assert all(isinstance(r["reward"], float) and 0.0 <= r["reward"] <= 1.0 for r in rollouts)
    return rollouts


def runtimes(nemo_gym: Path, tmp_path: Path, *selectors: str) -> str:
    done = gym_compose("resolve", "--search-dir", str(nemo_gym), *selectors, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_nemo_gyms_langgraph_reflection_agent_runs_on_its_runtime(nemo_gym_checkout, project, tmp_path):  # noqa: F811
    # langgraph_agent.yaml as its own comment says to use it: a flavor picked by entrypoint, a
    # resources server named; the rows' agent re-routed to it with agent_map, as in NeMo Gym
    agent = "++langgraph_agent.responses_api_agents.langgraph_agent"
    selectors = ("--resources-server", "citation_if", "--agent-type", "langgraph_agent",
                 f"{agent}.entrypoint=reflection_agent.py", f"{agent}.resources_server.name=citation_if",
                 "++agent_map.citation_if_simple_agent=langgraph_agent")
    assert "langgraph_agent: nemo_gym (" in runtimes(nemo_gym_checkout, tmp_path, *selectors)
    rows = nemo_gym_checkout / "resources_servers" / "citation_if" / "data" / "example.jsonl"
    rollouts = eval_run(nemo_gym_checkout, project, tmp_path, rows, *selectors)
    for rollout in rollouts:
        # the graph ran: a first answer, then max_reflections (2) critique-and-revise rounds
        answers = [item for item in rollout["response"]["output"] if item.get("role") == "assistant"]
        assert len(answers) > 1, rollout["response"]["output"]


@pytest.fixture
def fake_vllm_on_the_host():
    """gym-compose's fake vLLM, reachable from the stack's model container as host.docker.internal."""
    server = make_server(0, host="0.0.0.0")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def test_nemo_gyms_tool_simulation_agent_and_vllm_model_against_a_fake_vllm(
        nemo_gym_checkout, project, tmp_path, fake_vllm_on_the_host):  # noqa: F811
    port = fake_vllm_on_the_host.server_address[1]
    selectors = ("--resources-server", "single_step_tool_use_with_argument_comparison",
                 "--model-type", "vllm_model", "--model-url", f"http://host.docker.internal:{port}/v1",
                 "-m", "fake-model", "--model-api-key", "EMPTY",
                 "++policy_model.responses_api_models.vllm_model.docker.runtime=nemo_gym")
    said = runtimes(nemo_gym_checkout, tmp_path, *selectors)
    assert "single_step_tool_use_with_argument_comparison_agent: nemo_gym (" in said
    assert "policy_model: nemo_gym (docker.runtime: nemo_gym in the config)" in said
    server = "single_step_tool_use_with_argument_comparison"
    rows = nemo_gym_checkout / "resources_servers" / server / "data" / "example.jsonl"
    rollouts = eval_run(nemo_gym_checkout, project, tmp_path, rows, *selectors)
    # NeMo Gym's vllm_model answered every rollout from the fake's chat completions
    assert all(r["response"]["model"] == "fake-model" for r in rollouts)
    # the fake's answers are fixed (a text after a tool output, else the first tool with placeholder
    # arguments), so NeMo Gym's comparator's scores are too: one row's expected action matches
    assert sorted(r["reward"] for r in rollouts) == [0.0, 0.0, 0.0, 0.0, 1.0]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_fake/requests", timeout=10) as answer:
        chat = [r for r in json.load(answer) if r["path"] == "/v1/chat/completions"]
    assert len(chat) >= len(rollouts)
