"""Input rows -> rollouts: parsing errors, routing, repeats and NeMo Gym's indices, overrides, prompt config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gym_compose.collect.jsonl import read_input_lines
from gym_compose.collect.options import CollectOptions
from gym_compose.collect.prompt import load_prompt_config
from gym_compose.collect.routing import routing_table_from_config
from gym_compose.collect.rows import materialize_rows
from gym_compose.errors import UserError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_gym" / "blackjack"


def env_server(agent: str, port: int = 8000) -> dict:
    return {"environment_servers": {"impl": {"host": f"env-{agent}", "port": port,
                                             "agent_server": {"type": "responses_api_agents", "name": agent}}}}


TWO_AGENTS = {"env_a": env_server("alpha"), "env_b": env_server("beta"), "policy_model": {"responses_api_models": {"m": {"host": "x", "port": 1}}},
              "environment_server_routes": {"math_v1": "env_b"}}


def write(tmp_path: Path, lines: list) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def row(content: str, agent: str | None = None, **extra) -> dict:
    data = {"responses_create_params": {"input": [{"role": "user", "content": content}]}, **extra}
    if agent:
        data["agent_ref"] = {"name": agent}
    return data


def materialize(tmp_path, lines, config=TWO_AGENTS, prompt=None, **options):
    path = write(tmp_path, lines)
    opts = CollectOptions(input_path=path, output_dir=tmp_path / "out", **options)
    return materialize_rows(read_input_lines(path, opts.limit), path, opts, routing_table_from_config(config), prompt)


def test_malformed_line_names_file_and_line(tmp_path):
    with pytest.raises(UserError) as error:
        materialize(tmp_path, [row("a", "alpha"), '{"responses_create_params": ', row("b", "alpha")])
    assert "rows.jsonl, line 2: not valid JSON" in str(error.value)


def test_a_line_that_is_not_an_object_is_refused(tmp_path):
    with pytest.raises(UserError, match=r"line 1: expected a JSON object, got list"):
        materialize(tmp_path, ["[1, 2]"])


def test_unknown_agent_lists_the_agents_there_are(tmp_path):
    with pytest.raises(UserError) as error:
        materialize(tmp_path, [row("a", "alpha"), row("b", "gamma")])
    message = str(error.value)
    assert "line 2" in message and "'gamma'" in message and "alpha, beta" in message


def test_row_without_agent_needs_a_single_environment_server(tmp_path):
    with pytest.raises(UserError, match=r"no agent_ref and there are 2 environment servers \(env_a, env_b\)"):
        materialize(tmp_path, [row("a")])
    [only] = materialize(tmp_path, [row("a")], config={"env_a": env_server("alpha")})
    assert only["agent_ref"] == {"name": "alpha"}  # the one agent it can reach, named for metrics


def test_routing_picks_the_server_fronting_the_agent_and_taskset_routes():
    table = routing_table_from_config(TWO_AGENTS)
    assert table.server_for_row(row("x", "beta"), "here").base_url == "http://env-beta:8000"
    taskset_row = {"task_id": {"taskset": "math_v1", "id": "7"}, "task_input": {"q": 1}}
    assert table.server_for_row(taskset_row, "here").instance == "env_b"
    with pytest.raises(UserError, match="no environment_server_routes entry for taskset 'other'"):
        table.server_for_row({"task_id": {"taskset": "other"}, "task_input": {}}, "here")


def test_repeats_in_place_and_nemo_gym_indices(tmp_path):
    rows = materialize(tmp_path, [row("a", "alpha"), row("b", "beta"), row("a", "alpha")], num_repeats=2)
    contents = [r["responses_create_params"]["input"][0]["content"] for r in rows]
    assert contents == ["a", "a", "b", "b", "a", "a"]
    # identical lines share a task index; the rollout index keeps counting across them
    assert [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3)]


def test_materialized_inputs_match_nemo_gym_for_the_blackjack_example(tmp_path):
    config = {"env": env_server("blackjack_gymnasium_agent")}
    path = FIXTURES / "example.jsonl"
    opts = CollectOptions(input_path=path, output_dir=tmp_path, temperature=0.0, max_output_tokens=1024)
    rows = materialize_rows(read_input_lines(path), path, opts, routing_table_from_config(config))
    expected = [json.loads(line) for line in (FIXTURES / "example_rollouts_materialized_inputs.jsonl").read_text().splitlines()]
    assert rows == expected


def test_limit_overrides_and_agent_flag(tmp_path):
    rows = materialize(tmp_path, [row("a", "alpha", expected_answer="1"), row("b", "alpha"), row("c", "alpha")],
                       limit=2, top_p=0.9, agent_name="beta")
    assert len(rows) == 2
    assert all(r["agent_ref"] == {"name": "beta"} and r["responses_create_params"]["top_p"] == 0.9 for r in rows)
    assert rows[0]["expected_answer"] == "1"


def test_prompt_config_builds_the_input_from_row_fields(tmp_path):
    prompt_path = tmp_path / "prompt.yaml"
    prompt_path.write_text('system: "Be brief."\nuser: "Solve {question} {{exactly}}"\n')
    prompt = load_prompt_config(prompt_path)
    [built] = materialize(tmp_path, [{"question": "2+2", "agent_ref": {"name": "alpha"}, "responses_create_params": {"temperature": 0.1}}],
                          prompt=prompt)
    assert built["responses_create_params"] == {"temperature": 0.1, "input": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Solve 2+2 {exactly}"}]}
    with pytest.raises(UserError, match="line 1: the row already has responses_create_params.input"):
        materialize(tmp_path, [row("a", "alpha")], prompt=prompt)
    with pytest.raises(UserError, match="uses field 'question'"):
        materialize(tmp_path, [{"agent_ref": {"name": "alpha"}}], prompt=prompt)


def test_row_without_responses_create_params_is_refused(tmp_path):
    with pytest.raises(UserError, match="line 1: the row has no `responses_create_params`"):
        materialize(tmp_path, [{"agent_ref": {"name": "alpha"}}])


@pytest.mark.parametrize("template, expected", [
    ("Solve {question.text}", r"line 1: the user prompt template 'Solve \{question.text\}' cannot be filled from this row: .*text"),
    ("Solve {count[0]}", r"line 1: the user prompt template 'Solve \{count\[0\]\}' cannot be filled from this row: .*int"),
    ("Solve {meta[topic]}", r"line 1: the user prompt template 'Solve \{meta\[topic\]\}' looks up key 'topic'"),
    ("Solve {question", r"line 1: the user prompt template 'Solve \{question' cannot be filled"),
])
def test_a_prompt_template_that_does_not_fit_the_row_names_the_template_and_the_row(tmp_path, template, expected):
    prompt_path = tmp_path / "prompt.yaml"
    prompt_path.write_text(yaml.safe_dump({"user": template}))
    prompt = load_prompt_config(prompt_path)
    raw = {"question": "2+2", "count": 3, "meta": {}, "agent_ref": {"name": "alpha"}, "responses_create_params": {}}
    with pytest.raises(UserError, match=expected):
        materialize(tmp_path, [raw], prompt=prompt)


def materialize_with(config: dict, tmp_path: Path, rows: list, agent: str | None = None) -> list[dict]:
    from gym_compose.collect.agent_map import agent_map_from

    path = write(tmp_path, rows)
    options = CollectOptions(input_path=path, output_dir=tmp_path, agent_name=agent,
                             agent_map=agent_map_from(config, agent))
    return materialize_rows(read_input_lines(path), path, options, routing_table_from_config(config))


def test_agent_map_reroutes_by_row_agent_then_default_as_nemo_gym(tmp_path, capsys):
    config = {**TWO_AGENTS, "env_c": env_server("gamma"), "agent_map": {"alpha": "beta", "_default": "gamma"}}
    out = materialize_with(config, tmp_path, [row("a", "alpha"), row("b", "beta"), row("c"),
                                              row("d", task_source="alpha")])
    assert [r["agent_ref"]["name"] for r in out] == ["beta", "gamma", "gamma", "beta"]
    assert "alpha -> beta" in capsys.readouterr().err  # a row's own agent overridden is listed


def test_agent_flag_is_agent_map_default_and_conflicts_are_named(tmp_path):
    config = {**TWO_AGENTS, "agent_map": {"alpha": "alpha"}}
    out = materialize_with(config, tmp_path, [row("a", "alpha"), row("b", "beta")], agent="beta")
    assert [r["agent_ref"]["name"] for r in out] == ["alpha", "beta"]  # the specific entry beats --agent
    with pytest.raises(UserError, match="conflicts with agent_map._default 'alpha'"):
        materialize_with({**TWO_AGENTS, "agent_map": {"_default": "alpha"}}, tmp_path, [row("a")], agent="beta")


def test_legacy_agent_names_reach_the_renamed_instance(tmp_path):
    config = {"env": env_server("hermes_reasoning_gym_agent"), "hermes_reasoning_gym_agent": {"responses_api_agents": {}}}
    out = materialize_with(config, tmp_path, [row("a", "reasoning_gym_hermes_agent")], agent=None)
    assert out[0]["agent_ref"] == {"name": "hermes_reasoning_gym_agent"}
    out = materialize_with(config, tmp_path, [row("a")], agent="reasoning_gym_hermes_agent")
    assert out[0]["agent_ref"] == {"name": "hermes_reasoning_gym_agent"}
