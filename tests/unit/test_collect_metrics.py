"""Aggregate metrics: NeMo Gym's numbers for the recorded blackjack run, and pass@k when rows repeat."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_compose.metrics.agent_metrics import aggregate_metrics, pass_at_k_metrics

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_gym" / "blackjack"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_reproduces_nemo_gym_aggregate_metrics_for_blackjack():
    results = read_jsonl(FIXTURES / "example_rollouts.jsonl")
    rows = read_jsonl(FIXTURES / "example_rollouts_materialized_inputs.jsonl")
    expected = json.loads((FIXTURES / "example_rollouts_aggregate_metrics.json").read_text())
    got = aggregate_metrics(results, rows)
    # NeMo Gym's server-side aggregation puts a placeholder agent name in `sample`; ours names the agent.
    for entry in (*expected, *got):
        for group in entry["group_level_metrics"]:
            group.pop("sample")
    assert json.dumps(got) == json.dumps(expected)  # same keys, same order, same floats


def result(task: int, rollout: int, reward: float, agent: str = "a", **extra) -> dict:
    return {"reward": reward, "_ng_task_index": task, "_ng_rollout_index": rollout, "agent_ref": {"name": agent}, **extra}


def test_pass_at_k_for_binary_and_continuous_rewards():
    binary = [[result(0, 0, 1.0), result(0, 1, 0.0)], [result(1, 0, 0.0), result(1, 1, 0.0)]]
    metrics = pass_at_k_metrics(binary)
    assert metrics["pass@1/accuracy"] == pytest.approx(25.0)  # task 0: 1 - C(1,1)/C(2,1) = 0.5
    assert metrics["pass@2/accuracy"] == pytest.approx(50.0)
    assert metrics["pass@1[avg-of-2]/accuracy"] == pytest.approx(25.0)
    assert not any(key.startswith("majority@") for key in metrics)
    continuous = pass_at_k_metrics([[result(0, 0, 0.2), result(0, 1, 0.7)]])
    assert continuous["pass@1/accuracy"] == pytest.approx(20.0)
    assert continuous["pass@2/accuracy"] == pytest.approx(70.0)


def test_majority_at_k_uses_extracted_answers():
    task = [result(0, 0, 1.0, extracted_answer="4"), result(0, 1, 1.0, extracted_answer="4"), result(0, 2, 0.0, extracted_answer="5")]
    assert pass_at_k_metrics([task])["majority@3/accuracy"] == pytest.approx(100.0)


def test_per_agent_entries_missing_rollouts_and_repeat_metrics_only_when_repeated():
    rows = [result(t, r, 0, agent) for agent, t in (("a", 0), ("b", 1)) for r in range(2)]
    results = [result(0, 0, 1.0, "a"), result(0, 1, 0.0, "a"), result(1, 0, 1.0, "b", done=True)]
    plain = aggregate_metrics(results, rows)
    assert [e["agent_ref"]["name"] for e in plain] == ["a", "b"]
    b_group = plain[1]["group_level_metrics"][0]
    assert (b_group["num_rollouts"], b_group["expected_num_rollouts"], b_group["missing_num_rollouts"]) == (1, 2, 1)
    assert plain[1]["agent_metrics"]["mean/done"] == 1.0
    assert plain[1]["agent_metrics"]["std/reward"] == 0.0  # one value: pandas' fill-in, as NeMo Gym writes it
    assert not any(key.startswith("pass@") for key in plain[0]["agent_metrics"])
    repeated = aggregate_metrics(results, rows, repeated=True)
    assert repeated[0]["agent_metrics"]["pass@2/accuracy"] == pytest.approx(100.0)
    assert repeated[0]["key_metrics"] == {k: v for k, v in repeated[0]["agent_metrics"].items() if k.startswith("mean/")}


def test_majority_at_k_pairs_each_answer_with_its_own_reward_when_some_rewards_are_not_numbers():
    task = [result(0, 0, None, extracted_answer="9"), result(0, 1, 1.0, extracted_answer="4"),
            result(0, 2, 0.0, extracted_answer="5"), result(0, 3, 0.0, extracted_answer="5")]
    metrics = pass_at_k_metrics([task])
    # the scored rollouts answer 4 (right), 5, 5 (wrong): the majority is wrong
    assert metrics["majority@3/accuracy"] == pytest.approx(0.0)
    assert metrics["majority@1/accuracy"] == pytest.approx(100.0)
    assert metrics["pass@3/accuracy"] == pytest.approx(100.0)


def test_mixed_type_task_indices_still_give_metrics():
    results = [result("b", 0, 1.0), result(1, 0, 0.0), result("a", 1, 1.0), result("a", 0, 0.0), result(0, 0, 1.0),
               result(None, 0, 1.0, agent="z")]
    metrics = aggregate_metrics(results, repeated=True)
    assert [entry["agent_ref"]["name"] for entry in metrics] == ["a", "z"]
    groups = metrics[0]["group_level_metrics"]
    assert [group["_ng_task_index"] for group in groups] == [0, 1, "a", "b"]
    assert [info["_ng_rollout_index"] for info in groups[2]["rollout_infos"]] == [0, 1]
    assert metrics[0]["agent_metrics"]["pass@1/accuracy"] == pytest.approx(62.5)
    json.dumps(metrics)


def test_rollouts_sort_whatever_the_index_types():
    from gym_compose.metrics.row_keys import sortable_rollout_key

    rows = [result("x", 1, 0), result(2, 0, 0), result(1.5, 0, 0), result("x", 0, 0), result(None, 0, 0)]
    assert [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in sorted(rows, key=sortable_rollout_key)] == [
        (1.5, 0), (2, 0), ("x", 0), ("x", 1), (None, 0)]
