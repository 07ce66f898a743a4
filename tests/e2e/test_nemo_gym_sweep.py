"""The NeMo Gym server sweep, sampled (the full sweep: bench/bench_nemo_gym_servers.py, its table
in docs/nemo-gym-runtime.md). A fixed, representative sample of NeMo Gym 0.7's own resources
servers, fetched from the nemo-gym wheel on PyPI at test time, runs its example rows end to end
with the mock model, and each completes every rollout with the reward the full sweep recorded:

- citation_if: the lean runtime (its nemo_gym imports are all in the compatibility layer);
- bunsenbench_chemistry_mcq: the NeMo Gym runtime, no packages of its own;
- asr_with_pc: the NeMo Gym runtime chosen because app.py imports numpy (nemo-gym's dependency,
  not the lean base's), with its own requirements (jiwer, whisper_normalizer) on top.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.e2e.test_nemo_gym_compat import nemo_gym_checkout  # noqa: F401 - fixture
from tests.e2e.test_nemo_gym_runtime import run_rows

pytestmark = pytest.mark.docker

SAMPLE = [
    # server, runtime, mean reward of the mock model's answers on data/example.jsonl (5 rows each)
    ("citation_if", "lean", 0.2),
    ("bunsenbench_chemistry_mcq", "nemo_gym", 1.0),
    ("asr_with_pc", "nemo_gym", 1.0),
]


@pytest.fixture
def project(server):
    # one project per sampled server: the shared fixture's name (the test name cut to 30 characters)
    # would be the same for every parameter
    name = f"{PROJECT_PREFIX}-sweep-{server.replace('_', '-')}"[:60]
    yield name
    subprocess.run(["docker", "compose", "-p", name, "down", "-v", "--timeout", "1"], capture_output=True, timeout=120)


@pytest.mark.parametrize(("server", "runtime", "mean_reward"), SAMPLE, ids=[s[0] for s in SAMPLE])
def test_sampled_nemo_gym_server_completes_its_example_rows(nemo_gym_checkout, project, tmp_path,  # noqa: F811
                                                            server, runtime, mean_reward):
    rollouts, output = run_rows(nemo_gym_checkout, project, tmp_path, server)
    assert ("(NeMo Gym runtime)" in output) == (runtime == "nemo_gym"), output[-3000:]
    rewards = [float(r["reward"]) for r in rollouts]
    assert sum(rewards) / len(rewards) == pytest.approx(mean_reward)
