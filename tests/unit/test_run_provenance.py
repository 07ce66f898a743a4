"""What the manifest records: model endpoints and names, sampling options and the rows' own
values, row file hashes, the git commit, and where each masked secret came from (never its value)."""

import hashlib
import json

from gym_compose.runs.provenance import file_digest, git_commit, model_endpoints, provenance, sampling, secret_sources

CONFIG = {
    "policy_api_key": "sk-live-1", "policy_base_url": "https://api.example.test/v1", "policy_model_name": "m-1",
    "policy_model": {"responses_api_models": {"openai_model": {
        "openai_base_url": "https://api.example.test/v1", "openai_api_key": "sk-live-1", "openai_model": "m-1"}}},
    "judge": {"responses_api_models": {"mock_model": {"mode": "adversary"}}},
    "tools": {"resources_servers": {"search": {"hf_token": "hf-2", "max_output_tokens": 5}}},
}


def test_model_endpoints_and_names_per_model_server():
    assert model_endpoints(CONFIG) == {
        "policy_model": {"implementation": "openai_model", "endpoints": {"openai_base_url": "https://api.example.test/v1"},
                         "names": {"openai_model": "m-1"}},
        "judge": {"implementation": "mock_model", "endpoints": {}, "names": {}, "mode": "adversary"},
    }


def test_each_secret_path_names_its_source_and_no_value_is_kept():
    sources = secret_sources(CONFIG)
    assert sources == {"policy_api_key": "policy_api_key",
                       "policy_model.responses_api_models.openai_model.openai_api_key": "policy_api_key",
                       "tools.resources_servers.search.hf_token": None}
    assert "sk-live-1" not in json.dumps(sources) and "hf-2" not in json.dumps(sources)


def test_sampling_options_and_the_rows_values(tmp_path):
    rows = tmp_path / "input.jsonl"
    rows.write_text("".join(json.dumps({"responses_create_params": {"input": "q", "temperature": t, "seed": s}}) + "\n"
                            for t, s in ((0.5, 1), (0.5, 2), (0.5, 3))))
    found = sampling(["--num-repeats", "4", "--top-p=0.9", "--temperature", "0.7"], rows)
    assert found["options"] == {"top_p": "0.9", "temperature": "0.7"}
    assert found["rows"] == {"temperature": 0.5, "seed": {"distinct": 3, "first": [1, 2, 3]}}


def test_row_files_are_hashed_and_counted(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_bytes(b'{"a": 1}\n\n{"a": 2}\n')
    assert file_digest(rows) == {"sha256": hashlib.sha256(rows.read_bytes()).hexdigest(), "rows": 2, "bytes": 19}
    recorded = provenance(CONFIG, ["--limit", "2", "--resume", "--host-lease"], rows, [rows], {"engine": "x"})
    assert recorded["sampling"] == {"options": {}, "rows": {}}
    assert recorded["rows"]["input"]["rows"] == 2 and recorded["rows"]["datasets"][0]["file"] == str(rows)
    assert recorded["gym_compose"]["version"] and "commit" in recorded["gym_compose"]


def test_the_git_commit_of_a_checkout_and_none_elsewhere(tmp_path):
    assert git_commit(tmp_path) == {"commit": None, "dirty": None}
    here = git_commit()
    assert here["commit"] is None or len(here["commit"]) == 40
