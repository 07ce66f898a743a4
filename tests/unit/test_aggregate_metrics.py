"""`/aggregate_metrics` numbers and the collector's metrics file against NeMo Gym 0.7's own results.

`tests/fixtures/nemo_gym/aggregate_metrics/cases.json` was written by NeMo Gym 0.7's
`compute_aggregate_metrics` and `reward_profile` helpers (record.py there, same inputs and hooks).
"""

from __future__ import annotations

import json
import math
import runpy
import sys
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

import pytest

from gym_compose.collect.routing import routing_table_from_config
from gym_compose.collect.server_metrics import aggregate_through_servers, stripped
from gym_compose.metrics.aggregate import compute_aggregate_metrics, student_t_quantile
from gym_compose.server import reward_profile

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_gym"
RECORDED = json.loads((FIXTURES / "aggregate_metrics" / "cases.json").read_text())
RECORDER = FIXTURES / "aggregate_metrics" / "record.py"


def assert_same(ours, theirs, path="$"):
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and sorted(ours) == sorted(theirs), f"{path}: keys differ"
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{path}.{key}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), f"{path}: lengths differ"
        for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_same(a, b, f"{path}[{index}]")
    elif isinstance(theirs, float) and not isinstance(theirs, bool):
        assert math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-12), f"{path}: {ours} != {theirs}"
    else:
        assert ours == theirs, f"{path}: {ours!r} != {theirs!r}"


@pytest.fixture(scope="module")
def ours():
    """record.py run with gym-compose's implementation: the same inputs and hooks as the recording."""
    argv, buffer = sys.argv, StringIO()
    sys.argv = [str(RECORDER), "ours"]
    try:
        with redirect_stdout(buffer):
            runpy.run_path(str(RECORDER), run_name="__main__")
    finally:
        sys.argv = argv
    return json.loads(buffer.getvalue())


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_reproduces_nemo_gym_0_7(ours, case):
    assert_same(ours[case]["output"], RECORDED[case]["output"], case)


def test_blackjack_rollouts_give_nemo_gyms_repeat_statistics():
    rows = [json.loads(line) for line in (FIXTURES / "blackjack" / "example_rollouts.jsonl").read_text().splitlines()]
    metrics = compute_aggregate_metrics([stripped(r) for r in rows])
    assert metrics["agent_metrics"]["num_repeats"] == 5 and len(metrics["repeat_level_metrics"]) == 5
    assert metrics["agent_metrics"]["se_across_repeats/mean/reward"] == pytest.approx(0.48989794855663565)
    assert metrics["agent_metrics"]["ci_high_95_across_repeats/mean/reward"] == pytest.approx(1.5601747613165113)


@pytest.mark.parametrize("dof, quantile", [(1, 12.706204736174694), (4, 2.7764451051977934), (30, 2.0422724563012378)])
def test_student_t_quantile_matches_scipy(dof, quantile):
    assert student_t_quantile(0.975, dof) == pytest.approx(quantile, rel=1e-12)


def test_masked_rollouts_only_count_as_coverage():
    responses = [{"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0, "mask_sample": True},
                 {"_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 0.0, "mask_sample": False}]
    metrics = compute_aggregate_metrics(responses)
    assert metrics["agent_metrics"]["mean/reward"] == 0.0 and "mean/mask_sample" not in metrics["agent_metrics"]
    assert metrics["key_metrics"]["coverage/masked_rollouts"] == 1
    assert compute_aggregate_metrics([])["agent_metrics"] == {}


def test_highest_k_metrics_picks_the_largest_k():
    metrics = {"pass@1/accuracy": 1, "pass@4/accuracy": 4, "pass@4/no_answer": 0, "pass@1[avg-of-4]/accuracy": 2}
    assert reward_profile.highest_k_metrics(metrics, "pass@{k}") == {"pass@4/accuracy": 4, "pass@4/no_answer": 0}
    assert reward_profile.highest_k_metrics(metrics, "pass@{k}", exclude_names=["no_answer"]) == {"pass@4/accuracy": 4}


CONFIG = {
    "env_a": {"environment_servers": {"legacy_agent": {"host": "a", "port": 1,
                                                       "agent_server": {"type": "responses_api_agents", "name": "x"}}}},
    "env_b": {"environment_servers": {"legacy_agent": {"host": "b", "port": 2,
                                                       "agent_server": {"type": "responses_api_agents", "name": "y"}}}},
}


def rollout(agent, task, repeat, reward):
    return {"_ng_task_index": task, "_ng_rollout_index": repeat, "agent_ref": {"name": agent}, "reward": reward,
            "responses_create_params": {"input": "q"}, "ng_trajectory": {"big": 1},
            "response": {"output": ["..."], "usage": {"input_tokens": 3}}}


def test_collector_posts_each_servers_rollouts_stripped_and_keeps_its_answer(capsys):
    results = [rollout("x", 0, 0, 1.0), rollout("y", 1, 0, 0.0), rollout("x", 2, 0, 0.0)]
    posted = {}

    def post(url, body):
        posted[url] = body
        if url.startswith("http://a:1"):
            return 200, {"agent_metrics": {"custom": 7}, "key_metrics": {"custom": 7}, "group_level_metrics": [],
                         "repeat_level_metrics": []}
        return 404, {"detail": "Not Found"}

    entries = aggregate_through_servers(results, results, routing_table_from_config(CONFIG), repeated=False, post=post)
    assert sorted(posted) == ["http://a:1/aggregate_metrics", "http://b:2/aggregate_metrics"]
    sent = posted["http://a:1/aggregate_metrics"]["verify_responses"]
    assert [r["_ng_task_index"] for r in sent] == [0, 2]
    assert sent[0]["response"] == {"usage": {"input_tokens": 3}}
    assert "responses_create_params" not in sent[0] and "ng_trajectory" not in sent[0]
    a, b = entries
    assert (a["agent_ref"], a["_ng_environment_server"], a["key_metrics"]) == ({"name": "x"}, "env_a", {"custom": 7})
    assert b["_ng_environment_server"] == "env_b" and b["agent_metrics"]["mean/reward"] == 0.0  # 404: computed here
    assert "warning" not in capsys.readouterr().err


def test_a_failing_server_is_named_and_its_metrics_computed_here(capsys):
    results = [rollout("x", 0, 0, 1.0), rollout("x", 0, 1, 0.0)]
    entries = aggregate_through_servers(results, results, routing_table_from_config(CONFIG), repeated=True,
                                        post=lambda url, body: (500, "compute_metrics exploded"))
    assert "env_a answered /aggregate_metrics with 500 (compute_metrics exploded)" in capsys.readouterr().err
    assert entries[0]["agent_metrics"]["pass@2/accuracy"] == 100.0  # the default pass@k, rows being repeated
    assert entries[0]["agent_metrics"]["mean_across_repeats/mean/reward"] == 0.5


def test_the_end_of_run_metrics_read_rollouts_without_their_heavy_fields(tmp_path):
    """2,000 rollouts of ~40 KB each (80 MB of JSON): what the metrics step holds stays a small
    fraction of that, since each row is stripped as it is read (whole rows: a 100,000-rollout run
    was killed at the collector's 1 GiB limit)."""
    import json
    import tracemalloc

    from gym_compose.collect.collector import finished_for_metrics

    heavy = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "x" * 40_000}]}],
             "usage": {"input_tokens": 3, "output_tokens": 4}}
    path = tmp_path / "rollouts.jsonl"
    with path.open("w") as out:
        for index in range(2000):
            out.write(json.dumps({"_ng_task_index": index, "_ng_rollout_index": 0, "reward": 1.0,
                                  "response": heavy, "responses_create_params": {"input": "y" * 1000}}) + "\n")
        out.write(json.dumps({"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 0.0, "response": heavy}) + "\n")
    tracemalloc.start()
    finished = finished_for_metrics(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(finished) == 2000 and finished[0]["reward"] == 1.0  # the row written twice counts once, the first
    assert finished[0]["response"] == {"usage": {"input_tokens": 3, "output_tokens": 4}}
    assert peak < 8 * 2**20, f"{peak / 2**20:.1f} MiB held while reading 80 MB of rollouts"


def test_a_cost_block_is_averaged_and_summed_per_agent():
    from gym_compose.metrics.agent_metrics import aggregate_metrics

    rows = [{"_ng_task_index": 0, "_ng_rollout_index": i, "agent_ref": {"name": "a"}, "reward": 1.0,
             "cost": {"sandbox_leased_s": 2.0 * (i + 1), "sandbox_commands": i + 1}} for i in range(2)]
    (entry,) = aggregate_metrics(rows)
    metrics = entry["agent_metrics"]
    assert metrics["mean/cost.sandbox_leased_s"] == 3.0 and metrics["sum/cost.sandbox_leased_s"] == 6.0
    assert metrics["sum/cost.sandbox_commands"] == 3 and metrics["max/cost.sandbox_commands"] == 2.0
    assert entry["group_level_metrics"][0]["mean/cost.sandbox_commands"] == 1.5


def test_without_asking_the_servers_every_entry_is_computed_here():
    """A stopped run (resumed later) does not post every rollout so far to its servers."""
    results = [rollout("x", 0, 0, 1.0), rollout("y", 1, 0, 0.0), rollout("x", 2, 0, 0.0)]

    def post(url, body):
        raise AssertionError(f"asked {url}")

    entries = aggregate_through_servers(results, results, routing_table_from_config(CONFIG), repeated=False,
                                        post=post, ask_servers=False)
    assert [entry["agent_metrics"]["mean/reward"] for entry in entries] == [0.5, 0.0]
