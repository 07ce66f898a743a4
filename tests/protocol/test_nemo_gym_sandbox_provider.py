"""NeMo Gym 0.7's own sandbox API (its registry, AsyncSandbox and types, from the real package) on
gym-compose's broker through provider `gym_compose` (gym_compose/sandbox/nemo_gym_provider.py),
found the way the NeMo Gym runtime image publishes it: an entry point in a dist-info on sys.path.

NeMo Gym runs in a child process, so its real `nemo_gym` never meets the compatibility layer's
modules of the same name in this one. The broker runs here, on the fake engine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.protocol
REPO = Path(__file__).resolve().parents[2]
ENTRY_POINT = REPO / "gym_compose" / "sandbox" / "nemo_gym_entry_point"
DRIVER = Path(__file__).with_name("nemo_gym_sandbox_driver.py")


def test_nemo_gyms_sandbox_api_runs_on_the_broker(broker, nemo_gym_checkout, tmp_path):  # noqa: F811
    shutil.copytree(ENTRY_POINT, tmp_path / "site" / "gym_compose_sandbox_provider-1.0.dist-info")
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(nemo_gym_checkout), str(tmp_path / "site"), str(REPO)])}
    child = subprocess.run([sys.executable, str(DRIVER)], capture_output=True, text=True, timeout=180, env=environ,
                           cwd=tmp_path)
    assert child.returncode == 0, child.stderr[-4000:]
    seen = json.loads(child.stdout.strip().splitlines()[-1])
    assert "gym_compose" in seen["providers"] and "docker" in seen["providers"]
    assert seen["provider"] == "gym_compose.sandbox.nemo_gym_provider.GymComposeSandboxProvider"
    assert "'docker'" in seen["notice"] and seen["metadata"] == {"team": "x"}
    assert seen["exec"] == ["nemo_gym.sandbox.providers.base", 4, "hi\nseeded", "err\n", None]
    assert seen["timeout"] == [124, "timeout"]
    assert seen["user"][:2] == [125, "user"] and "cannot run as 'nobody'" in seen["user"][2]
    assert seen["round_trip"] and seen["status"] and seen["stopped"]
    assert seen["connected"] == "seeded"
    assert seen["paused"] == [125, "sandbox", True, "thawed\n"]
    refused = seen["refused"]
    assert "no GPUs" in refused["gpu"] and "publish no ports" in refused["ports"]
    assert "entrypoint is not supported" in refused["entrypoint"] and "not in the plan" in refused["image"]
    assert broker.live() == []
    assert broker.engine.created[0]["HostConfig"]["NanoCpus"] == 500_000_000  # NeMo Gym's resources.cpu
