"""The GPU path's rendered project is one Docker Compose accepts (no GPU needed: `config` only)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.e2e import PROJECT_PREFIX
from tests.support.e2e import gym_compose

pytestmark = pytest.mark.docker


def test_local_vllm_model_project_passes_compose_config(tmp_path):
    out = tmp_path / "rendered"
    render = gym_compose("render", "-o", str(out), "-p", f"{PROJECT_PREFIX}-models-gpu", "--resources-server",
                         "example_single_tool_call", "--model-type", "local_vllm_model", "-m", "Qwen/Qwen3-0.6B",
                         cwd=tmp_path)
    assert render.returncode == 0, render.stderr
    checked = subprocess.run(["docker", "compose", "-f", str(out / "compose.yaml"), "config", "--format", "json"],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    project = yaml.safe_load(checked.stdout)
    engine = project["services"]["policy-model-vllm"]
    devices = engine["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert engine["volumes"][0]["source"] == "model-cache"
    assert project["volumes"]["model-cache"] == {"name": "gym-compose-model-cache", "external": True}
