"""`/aggregate_metrics` through real server processes: environment -> agent -> resources, and the collector's file.

The resources server is written against NeMo Gym's names (`nemo_gym.*`, served by the
compatibility layer) and overrides `compute_metrics` / `get_key_metrics`, as NeMo Gym's
benchmark servers do; its numbers must reach the collector's `rollouts_aggregate_metrics.json`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import httpx
import yaml
from conftest import REPO_ROOT, SERVER_IMAGES

from tests.support.stacks import gymnasium_stack, seed_verify_stack

SCORING_APP = textwrap.dedent('''
    from nemo_gym.base_resources_server import BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer
    from nemo_gym.reward_profile import compute_pass_majority_metrics, highest_k_metrics


    class ScoreRequest(BaseVerifyRequest):
        score: float


    class ScoreResponse(BaseVerifyResponse):
        score: float


    class ScoringServer(SimpleResourcesServer):
        async def verify(self, body: ScoreRequest) -> ScoreResponse:
            return ScoreResponse(**body.model_dump(), reward=body.score)

        def compute_metrics(self, tasks):
            metrics, _, _, _ = compute_pass_majority_metrics(tasks)
            return {**metrics, "scoring/tasks_seen": len(tasks)}

        def get_key_metrics(self, agent_metrics):
            seen = agent_metrics["scoring/tasks_seen"]
            return {**highest_k_metrics(agent_metrics, "pass@{k}"), "scoring/tasks_seen": seen}


    if __name__ == "__main__":
        ScoringServer.run_webserver()
''')


def scoring_rows(path, scores):
    rows = [{"responses_create_params": {"input": f"task {i}"}, "score": score} for i, score in enumerate(scores)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_environment_forwards_to_the_resources_servers_own_metrics_and_the_collector_writes_them(start_stack, tmp_path):
    app_dir = tmp_path / "scoring"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(SCORING_APP)
    stack = start_stack(seed_verify_stack("scoring"), {"scoring": app_dir})

    posted = {"verify_responses": [{"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0},
                                   {"_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 0.0}]}
    answer = httpx.post(stack.url("environment") + "/aggregate_metrics", json=posted, timeout=30)
    assert answer.status_code == 200, answer.text
    metrics = answer.json()
    assert metrics["agent_metrics"]["mean/reward"] == 0.5
    assert metrics["agent_metrics"]["scoring/tasks_seen"] == 2
    assert metrics["key_metrics"] == {"pass@1/accuracy": 50.0, "scoring/tasks_seen": 2}
    assert [g["_ng_task_index"] for g in metrics["group_level_metrics"]] == [0, 1]
    bad = httpx.post(stack.url("environment") + "/aggregate_metrics", json={"rows": []}, timeout=30)
    assert bad.status_code == 422  # the resources server's answer, relayed unchanged

    rows = scoring_rows(tmp_path / "rows.jsonl", [1.0, 0.0, 1.0])
    out = tmp_path / "out"
    env = {**os.environ, "NEMO_GYM_CONFIG_DICT": yaml.safe_dump(stack.config)}
    done = subprocess.run([sys.executable, "-m", "gym_compose.collect", "--input", str(rows), "--output-dir", str(out),
                           "--num-repeats", "2"], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    [entry] = json.loads((out / "rollouts_aggregate_metrics.json").read_text())
    assert entry["agent_ref"] == {"name": "agent"} and entry["_ng_environment_server"] == "environment"
    assert entry["agent_metrics"]["scoring/tasks_seen"] == 3
    assert entry["key_metrics"] == {"pass@2/accuracy": 200 / 3, "scoring/tasks_seen": 3}
    assert [r["_ng_rollout_index"] for r in entry["repeat_level_metrics"]] == [0, 1]
    assert "warning" not in done.stderr


def test_gymnasium_agent_forwards_to_its_environment(start_stack):
    stack = start_stack(gymnasium_stack("blackjack"), {"blackjack": SERVER_IMAGES / "blackjack"})
    posted = {"verify_responses": [{"_ng_task_index": 0, "_ng_rollout_index": r, "reward": float(r)} for r in range(2)]}
    answer = httpx.post(stack.url("environment") + "/aggregate_metrics", json=posted, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["agent_metrics"]["mean_across_repeats/mean/reward"] == 0.5
