"""The compatibility contract: NeMo Gym 0.7's own configs and resources servers, unchanged.

The released nemo-gym wheel is downloaded from PyPI once (cached under ~/.cache/gym-compose) and
used as a --search-dir, the way a user points gym-compose at a NeMo Gym checkout. Its own
resources servers (app.py importing nemo_gym.*) run in containers against gym-compose's
built-in agents and mock model, on NeMo Gym's recorded fixture rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.e2e.test_stack import free_port, gym_compose, labelled
from tests.e2e import PROJECT_PREFIX

pytestmark = pytest.mark.docker

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_gym"
NEMO_GYM_VERSION = "0.7.0"


@pytest.fixture(scope="module")
def nemo_gym_checkout() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gym-compose" / f"nemo-gym-{NEMO_GYM_VERSION}"
    unpacked = cache / "tree"
    if not (unpacked / "resources_servers").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        download = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--ignore-requires-python",
             "--dest", str(cache), f"nemo-gym=={NEMO_GYM_VERSION}"],
            capture_output=True, text=True, timeout=300,
        )
        assert download.returncode == 0, f"could not download nemo-gym {NEMO_GYM_VERSION} from PyPI:\n{download.stderr}"
        (wheel,) = cache.glob("nemo_gym-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacked)
    return unpacked


@pytest.fixture
def project(request) -> str:
    name = f"{PROJECT_PREFIX}-{request.node.name.replace('_', '-')[:30].lower()}"
    yield name
    subprocess.run(["docker", "compose", "-p", name, "down", "-v", "--timeout", "1"], capture_output=True, timeout=120)


def fixture_rows(name: str) -> Path:
    return FIXTURES / name / "example.jsonl"


def collect(nemo_gym: Path, project: str, tmp_path: Path, *selector: str, rows: Path) -> list[dict]:
    up = gym_compose("up", "-p", project, "--head-port", str(free_port()), "--search-dir", str(nemo_gym),
                     *selector, "--input", str(rows), cwd=tmp_path)
    assert up.returncode == 0, up.stderr[-4000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    assert labelled("container", project) == []
    return [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]


def test_nemo_gym_example_single_tool_call_server_and_rows(nemo_gym_checkout, project, tmp_path):
    rows = fixture_rows("example_single_tool_call")
    rollouts = collect(nemo_gym_checkout, project, tmp_path, "--resources-server", "example_single_tool_call",
                       rows=rows)
    assert len(rollouts) == len(rows.read_text().splitlines())
    assert all(r["reward"] == 1.0 for r in rollouts)  # the mock model calls get_weather, NeMo Gym's verifier agrees
    assert all(r["agent_ref"]["name"] == "example_single_tool_call_simple_agent" for r in rollouts)


def test_nemo_gym_blackjack_environment_runs_to_a_terminal_state(nemo_gym_checkout, project, tmp_path):
    rows = fixture_rows("blackjack")
    rollouts = collect(nemo_gym_checkout, project, tmp_path, "--environment", "blackjack", rows=rows)
    assert len(rollouts) == len(rows.read_text().splitlines())
    for rollout in rollouts:
        assert rollout["reward"] in (-1.0, 0.0, 1.0)
        assert rollout["terminated"] or rollout["truncated"]
