"""A real model in the stack: Gemma 3 270M from PyPI on llama.cpp, on the CPU (marked `docker`).

The first run builds the local_llama_cpp_model image (xllamacpp's prebuilt wheel and the model's
part packages: about a minute); later runs find it by its content hash.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.e2e import free_port, gym_compose, labelled, only_run_dir, read_jsonl, remove_project

pytestmark = pytest.mark.docker


@pytest.fixture
def project(request) -> str:
    name = f"{PROJECT_PREFIX}-models-{request.node.name.replace('_', '-')[:24].lower()}"
    yield name
    remove_project(name)


@pytest.mark.timeout(1200)  # the first run builds the image: a 34 MB wheel and the model's ~250 MB, offline
def test_benchmark_with_a_local_cpu_model_completes_rollouts_and_leaves_nothing(project, tmp_path):
    up = gym_compose("up", "--benchmark", "example_single_tool_call", "--model-type", "local_llama_cpp_model",
                     "--limit", "2", "--max-output-tokens", "16", "-p", project, "--head-port", str(free_port()),
                     cwd=tmp_path, timeout=1200)
    assert up.returncode == 0, up.stderr[-4000:]
    run_dir = only_run_dir(tmp_path / "results")
    rollouts = read_jsonl(run_dir / "rollouts.jsonl")
    assert sorted(row["_ng_task_index"] for row in rollouts) == [0, 1]
    failures = run_dir / "rollouts_failures.jsonl"
    assert not failures.exists() or read_jsonl(failures) == []
    for row in rollouts:
        usage = row["response"]["usage"]
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0  # a real model generated them
        assert usage["output_tokens"] <= 16  # --max-output-tokens reached the model (and keeps the test short)
        assert row["response"]["model"] == "gemma-3-270m"
        assert isinstance(row["reward"], float)
    metrics = json.loads((run_dir / "rollouts_aggregate_metrics.json").read_text())
    assert metrics[0]["agent_metrics"]["mean/output_tokens"] > 0
    for kind in ("container", "network", "volume"):
        assert labelled(kind, project) == [], kind
