"""A NeMo Gym 0.7 judge server whose judge model no config defines (abstention names
`genrm_model`), run with its example rows: the built-in mock serves the judge
(docs/models.md#every-model-a-config-names), and every rollout completes, judged."""

from __future__ import annotations

import pytest

from tests.support.e2e import BUILDS_NEMO_GYM_RUNTIME, run_rows

pytestmark = [pytest.mark.docker, BUILDS_NEMO_GYM_RUNTIME]


def test_a_judge_server_runs_with_the_mock_judge(nemo_gym_checkout, project, tmp_path):
    rollouts, output = run_rows(nemo_gym_checkout, project, tmp_path, "abstention")
    assert "notice: genrm_model (named by abstention.resources_servers.abstention.judge_model_server) has no " \
           "endpoint (no config defines it), so the built-in mock model serves it" in output
    assert output.count("notice: genrm_model") == 1
    assert len(rollouts) == 5
    assert all(isinstance(rollout["reward"], float) for rollout in rollouts)
