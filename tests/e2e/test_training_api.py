"""Training against a stack, through the Python API only (issue 26): what a trainer does.

`Stack` up, 50 rollouts through NeMo Gym 0.7's own client (`RolloutCollectionHelper.run_examples`,
from the nemo-gym package in its Python 3.13 venv on the host, as NeMo RL calls it), the policy
model's vLLM URLs switched mid-run between two fake vLLMs on the host, token ids and log-probs on
every turn and contiguous across turns, the API's own rollout iterator and metrics, down with
nothing left. Then `RunHelper` started the way NeMo RL's `_spinup` starts NeMo Gym's, and
`run_examples` against the head at the node's address.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from omegaconf import DictConfig

from gym_compose.api import GlobalConfigDictParserConfig, RunHelper, Stack, is_failure
from tests.support.e2e import REPO, free_port, labelled, read_jsonl
from tests.support.nemo_gym import nemo_gym_venv
from tests.support.trainer_checks import assert_trainable, start_fake_vllm

pytestmark = pytest.mark.docker

ROWS = REPO / "server_images/example_single_tool_call/data/example.jsonl"
SERVER_CONFIG = REPO / "server_images/example_single_tool_call/configs/example_single_tool_call.yaml"
TRAINING_MODEL = REPO / "configs/vllm_model/vllm_model_for_training.yaml"
AGENT = "example_single_tool_call_simple_agent"
RUN_EXAMPLES = REPO / "tests/support/nemo_gym_run_examples.py"


def training_rows(count: int) -> list[dict]:
    base = [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]
    return [{**base[i % len(base)], "agent_ref": {"name": AGENT}} for i in range(count)]


def run_examples(venv: Path, rows: list[dict], host: str, port: int, tmp_path: Path, name: str) -> list[dict]:
    """NeMo Gym's client, in its own venv, against the head at host:port."""
    rows_file, out = tmp_path / f"{name}.jsonl", tmp_path / f"{name}_results.jsonl"
    rows_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    ran = subprocess.run([str(venv / "bin" / "python"), "-I", str(RUN_EXAMPLES), str(rows_file), host, str(port), str(out)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-4000:]
    return read_jsonl(out)


def chat_requests(fake) -> int:
    answer = httpx.get(f"http://127.0.0.1:{fake.server_address[1]}/_fake/requests", timeout=30)
    return sum(1 for request in answer.json() if request["path"] == "/v1/chat/completions")


def node_ip() -> str:
    """This machine's address on its network (what a trainer's node IP is), else loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))  # no packet is sent: it only picks the route
            return probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"


@pytest.fixture
def two_fake_vllms():
    """Two fake vLLM engines on the host, reachable from the containers as host.docker.internal."""
    fakes = [start_fake_vllm("0.0.0.0"), start_fake_vllm("0.0.0.0")]
    yield fakes
    for fake in fakes:
        fake.shutdown()


async def through_the_api(stack: Stack, rows: list[dict]) -> list[dict]:
    return [row async for row in stack.rollouts(rows, parallel=4)]


@pytest.mark.timeout(1800)  # the first run builds NeMo Gym's venv (pip: minutes on a loaded 2-core machine)
def test_a_trainer_drives_the_stack_through_the_python_api(project, tmp_path, two_fake_vllms):
    venv = nemo_gym_venv()
    first, second = two_fake_vllms
    stack = Stack.from_configs(
        resources_servers=["example_single_tool_call"], model_types=["vllm_model/vllm_model_for_training"],
        model_url=f"http://host.docker.internal:{first.server_address[1]}/v1", model_name="fake-model",
        model_api_key="EMPTY", project=project, head_port=free_port())
    with stack:
        head = urlsplit(stack.head_url)
        assert head.hostname and head.port
        before = run_examples(venv, training_rows(25), head.hostname, head.port, tmp_path, "before")
        served_by_first = chat_requests(first)
        assert served_by_first == 2 * 25 and chat_requests(second) == 0  # two model turns per rollout

        # the trainer's engines moved: the model server re-reads its upstreams, no restart
        # (a loopback URL is the host's, so it becomes host.docker.internal inside the container)
        second_port = second.server_address[1]
        assert stack.set_model_urls("policy_model", [f"http://127.0.0.1:{second_port}/v1"]) == [
            f"http://host.docker.internal:{second_port}/v1"]
        after = run_examples(venv, training_rows(25), head.hostname, head.port, tmp_path, "after")
        assert chat_requests(first) == served_by_first and chat_requests(second) == 2 * 25

        for row in before + after:
            assert assert_trainable(row) == 2  # the tool call, then the answer: ids, log-probs, contiguous
            assert isinstance(row["reward"], float)
        ours = asyncio.run(through_the_api(stack, training_rows(4) + [{"agent_ref": {"name": AGENT}}]))
        assert sum(is_failure(row) for row in ours) == 1  # the row without responses_create_params
        assert all(assert_trainable(row) == 2 for row in ours if not is_failure(row))
        [entry] = stack.aggregate_metrics(before + after)
        assert entry["agent_ref"] == {"name": AGENT}
        assert entry["agent_metrics"]["mean/reward"] == pytest.approx(sum(r["reward"] for r in before + after) / 50)
    assert labelled("container", project) == [] and labelled("network", project) == []


@pytest.mark.timeout(1800)
def test_the_run_helper_starts_as_nemo_rl_spins_up_nemo_gym_then_run_examples(project, tmp_path, two_fake_vllms):
    venv = nemo_gym_venv()
    fake = two_fake_vllms[0]
    ip, head_port = node_ip(), free_port()
    (tmp_path / "nemo_gym_env.yaml").write_text("policy_model_name: fake-model\n")
    # NeMo RL's NemoGym._spinup (nemo_rl/environments/nemo_gym.py, as REFERENCE.md's "Trainers"
    # section records it): the policy keys, the trainer's vLLM URLs, default_host = the node IP,
    # the port range and aiohttp limits, the head on 0.0.0.0 at a free port; then RunHelper().start
    # with skip_load_from_cli and its dotenv file, and a head_server_config at the node IP.
    initial = {
        "config_paths": [str(SERVER_CONFIG), str(TRAINING_MODEL)],
        "policy_api_key": "dummy_key",
        "policy_base_url": [f"http://{ip}:{fake.server_address[1]}/v1"],
        "default_host": ip, "port_range_low": 5000, "port_range_high": 5999,
        "global_aiohttp_connector_limit_per_host": 16_384, "global_aiohttp_connector_limit": 65_536,
        "head_server": {"host": "0.0.0.0", "port": head_port},
        "gym_compose_project": project,  # ours: the e2e tests' project prefix
    }
    rh = RunHelper()
    rh.start(GlobalConfigDictParserConfig(dotenv_path=tmp_path / "nemo_gym_env.yaml",
                                          initial_global_config_dict=DictConfig(initial), skip_load_from_cli=True))
    try:
        rh.poll()
        assert httpx.get(f"http://{ip}:{head_port}/", timeout=30).json() == {"status": "ok"}  # at the node IP
        results = run_examples(venv, training_rows(5), ip, head_port, tmp_path, "spinup")
        assert [assert_trainable(row) for row in results] == [2] * 5
        assert chat_requests(fake) == 10
        rh.poll()
    finally:
        rh.shutdown()
    assert labelled("container", project) == [] and labelled("network", project) == []
