"""Which rows a collection run sends: the config's benchmark datasets, checked before any container."""

import json
from pathlib import Path

import pytest

from gym_compose.errors import UserError
from gym_compose.runs.datasets import benchmark_datasets, check_rows, uniform_num_repeats, write_collection_input


def agent(datasets: list[dict]) -> dict:
    return {"responses_api_agents": {"simple_agent": {"entrypoint": "app.py", "datasets": datasets}}}


def rows_file(tmp_path: Path, name: str, rows: list[dict]) -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return name


def test_benchmark_rows_get_their_agent_and_keep_an_explicit_agent_ref(tmp_path):
    bench = rows_file(tmp_path, "bench.jsonl", [{"responses_create_params": {"input": "a"}},
                                                {"responses_create_params": {"input": "b"}, "agent_ref": {"name": "other"}}])
    example = rows_file(tmp_path, "example.jsonl", [{"responses_create_params": {"input": "x"}}])
    data = {"my_agent": agent([{"name": "b", "type": "benchmark", "jsonl_fpath": bench},
                               {"name": "e", "type": "example", "jsonl_fpath": example}])}
    datasets = benchmark_datasets(data, [tmp_path])
    assert [d.name for d in datasets] == ["b"]  # example datasets are not collected
    target = tmp_path / "run" / "input.jsonl"
    assert write_collection_input(datasets, target) == 2
    written = [json.loads(line) for line in target.read_text().splitlines()]
    assert [row["agent_ref"]["name"] for row in written] == ["my_agent", "other"]


def test_missing_dataset_file_says_where_it_looked_and_how_to_prepare_it(tmp_path):
    data = {"my_agent": agent([{"name": "b", "type": "benchmark", "jsonl_fpath": "data/b.jsonl",
                                "prepare_script": "benchmarks/b/prepare.py"}])}
    with pytest.raises(UserError) as error:
        benchmark_datasets(data, [tmp_path])
    assert "data/b.jsonl" in str(error.value) and str(tmp_path) in str(error.value)
    assert "eval prepare" in str(error.value)


def test_bad_line_names_file_and_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"responses_create_params": {}}\n{oops\n')
    with pytest.raises(UserError, match=r"rows.jsonl, line 2"):
        check_rows(path)


def test_datasets_must_agree_on_num_repeats(tmp_path):
    one = rows_file(tmp_path, "one.jsonl", [{"responses_create_params": {}}])
    two = rows_file(tmp_path, "two.jsonl", [{"responses_create_params": {}}])
    data = {"a": agent([{"name": "one", "type": "benchmark", "jsonl_fpath": one, "num_repeats": 4}]),
            "b": agent([{"name": "two", "type": "benchmark", "jsonl_fpath": two, "num_repeats": 2}])}
    with pytest.raises(UserError, match="--num-repeats"):
        uniform_num_repeats(benchmark_datasets(data, [tmp_path]))
    data["b"] = agent([{"name": "two", "type": "benchmark", "jsonl_fpath": two, "num_repeats": 4}])
    assert uniform_num_repeats(benchmark_datasets(data, [tmp_path])) == 4


def test_a_datasets_prompt_config_turns_raw_rows_into_prompts(tmp_path):
    bench = rows_file(tmp_path, "bench.jsonl", [{"question": "1+1?", "expected_answer": "2"}])
    (tmp_path / "math.yaml").write_text("system: Solve it.\nuser: 'Question: {question}'\n")
    data = {"my_agent": agent([{"name": "b", "type": "benchmark", "jsonl_fpath": bench, "prompt_config": "math.yaml"}])}
    target = tmp_path / "input.jsonl"
    write_collection_input(benchmark_datasets(data, [tmp_path]), target)
    (row,) = [json.loads(line) for line in target.read_text().splitlines()]
    assert row["responses_create_params"]["input"] == [
        {"role": "system", "content": "Solve it."}, {"role": "user", "content": "Question: 1+1?"}]
    assert row["expected_answer"] == "2" and row["agent_ref"] == {"name": "my_agent"}
    # a --prompt-config given on the command line replaces the dataset's own
    write_collection_input(benchmark_datasets(data, [tmp_path]), target, apply_dataset_prompts=False)
    assert "responses_create_params" not in json.loads(target.read_text())
