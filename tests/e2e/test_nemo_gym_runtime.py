"""NeMo Gym 0.7's own servers on the NeMo Gym runtime (docs/nemo-gym-runtime.md): the real
nemo-gym package in the shared runtime image, the server's code at /srv/gym/<type>/<name>/,
started as `gym env start` starts it, behind gym-compose's built-in agent and mock model.

One stack per test; the runtime image is built once (the first test pays for it).
"""

from __future__ import annotations

import pytest

from tests.support.e2e import BUILDS_NEMO_GYM_RUNTIME, gym_compose, run_rows

pytestmark = [pytest.mark.docker, BUILDS_NEMO_GYM_RUNTIME]


def test_resolve_says_which_runtime_and_why(nemo_gym_checkout, tmp_path):  # noqa: F811
    done = gym_compose("resolve", "--search-dir", str(nemo_gym_checkout), "--resources-server",
                       "example_tool_call_multireward", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "example_tool_call_multireward: nemo_gym (imports what the compatibility layer lacks: " \
           "nemo_gym.base_resources_server.BaseMultiRewardVerifyResponse" in done.stderr
    assert "example_tool_call_multireward_simple_agent: lean (built-in implementation)" in done.stderr


def test_a_server_the_layer_cannot_serve_runs_on_the_real_nemo_gym(nemo_gym_checkout, project, tmp_path):  # noqa: F811
    rollouts, output = run_rows(nemo_gym_checkout, project, tmp_path, "example_tool_call_multireward")
    assert "(NeMo Gym runtime)" in output
    # NeMo Gym's own verify answered: its multi-reward response fields are in every rollout
    assert all(isinstance(r["reward"], float) for r in rollouts)
