"""The helpers other modules use: redact, instances, find_implementation_dir, resolve_path."""

from __future__ import annotations

from pathlib import Path

from gym_compose.config import ConfigRequest, find_implementation_dir, instances, load, redact, resolve_path


def test_redact_hides_every_secret_looking_key_at_any_depth_and_leaves_the_rest():
    data = {
        "policy_api_key": "sk-1",
        "server": {"openai_api_key": "sk-2", "hf_token": "hf", "db_password": "pw", "url": "http://x", "unset_token": None},
        "client_secrets": {"a": "s1", "b": ["s2"]},
        "rows": [{"Api_Key": "sk-3", "n": 1}],
    }
    shown = redact(data)
    assert shown == {
        "policy_api_key": "****",
        "server": {"openai_api_key": "****", "hf_token": "****", "db_password": "****", "url": "http://x", "unset_token": None},
        "client_secrets": {"a": "****", "b": ["****"]},
        "rows": [{"Api_Key": "****", "n": 1}],
    }
    assert data["policy_api_key"] == "sk-1"  # the input is left alone


def test_redact_leaves_token_counters_alone_and_hides_authorization_headers():
    data = {"max_output_tokens": 128, "tokenizer": "gpt2", "headers": {"Authorization": "Bearer x"}}
    assert redact(data) == {"max_output_tokens": 128, "tokenizer": "gpt2", "headers": {"Authorization": "****"}}


def test_redact_shows_flags_whose_names_merely_mention_tokens():
    data = {"return_token_id_information": True, "hf_token": "hf_x", "refresh_token": False}
    assert redact(data) == {"return_token_id_information": True, "hf_token": "****", "refresh_token": False}


def test_instances_lists_name_type_implementation_and_spec_but_not_settings():
    data = {
        "head_server": {"host": "h"},
        "policy_base_url": "http://x",
        "shared": {"value": 1},
        "res": {"resources_servers": {"impl": {"entrypoint": "app.py", "domain": "math"}}},
        "policy_model": {"responses_api_models": {"mock_model": {"entrypoint": "app.py"}}},
    }
    found = [(i.name, i.server_type, i.implementation, i.spec) for i in instances(data)]
    assert found == [
        ("res", "resources_servers", "impl", {"entrypoint": "app.py", "domain": "math"}),
        ("policy_model", "responses_api_models", "mock_model", {"entrypoint": "app.py"}),
    ]


def test_find_implementation_dir_tries_each_layout_under_each_root(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    (second / "server_images/shared_impl").mkdir(parents=True)
    (first / "resources_servers/shared_impl").mkdir(parents=True)
    (second / "environments/env_impl").mkdir(parents=True)
    assert find_implementation_dir("resources_servers", "shared_impl", [first, second]) == first / "resources_servers/shared_impl"
    assert find_implementation_dir("environment_servers", "env_impl", [first, second]) == second / "environments/env_impl"
    assert find_implementation_dir("resources_servers", "absent", [first, second]) is None


def test_resolve_path_prefers_the_writing_files_root_then_every_root(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for root in (first, second):
        (root / "data").mkdir(parents=True)
        (root / "data/rows.jsonl").write_text("{}\n")
    assert resolve_path("data/rows.jsonl", [first, second]) == first / "data/rows.jsonl"
    assert resolve_path("data/rows.jsonl", [first, second], first_root=second) == second / "data/rows.jsonl"
    assert resolve_path("data/absent.jsonl", [first, second]) is None


def test_config_paths_from_the_command_line_join_the_files(tmp_path):
    (tmp_path / "a.yaml").write_text("value: {a: 1, b: 1}\n")
    (tmp_path / "b.yaml").write_text("value: {b: 2}\n")
    loaded = load(ConfigRequest(config_files=[Path("a.yaml")], overrides=["+config_paths=[b.yaml]"]), cwd=tmp_path)
    assert loaded.data["value"] == {"a": 1, "b": 2}
    assert loaded.data["config_paths"] == ["a.yaml", "b.yaml"]


def test_origins_name_the_source_that_last_set_each_key(tmp_path):
    (tmp_path / "a.yaml").write_text("one: {x: 1}\ntwo: {x: 1}\n")
    (tmp_path / "env.yaml").write_text("two: {x: 2}\n")
    loaded = load(ConfigRequest(config_files=[Path("a.yaml")], overrides=["++three=3"]), cwd=tmp_path)
    assert loaded.origins["one"] == str(tmp_path / "a.yaml")
    assert loaded.origins["two"] == str(tmp_path / "env.yaml")
    assert loaded.origins["three"] == "the command line"


def test_resolve_masks_what_nemo_gym_masks_in_its_printed_config_and_secrets_and_passwords():
    from gym_compose.config import redact_for_display

    config = {"policy_api_key": "sk-1", "m": {"responses_api_models": {"openai_model": {
        "openai_api_key": "sk", "max_output_tokens": 512, "extra_headers": {"X-Auth": "abc"},
        "forward_task_header": True, "keys": ["a", "b"], "tools": [{"hf_token": "t", "name": "n"}],
        "unset_key": None}}}, "client_secret": "shh", "db_password": "pw", "name": "x"}
    # NeMo Gym 0.7's recursively_hide_secrets on the same dict (substrings token/key/header), plus
    # REFERENCE.md's secret and password keys
    assert redact_for_display(config) == {"policy_api_key": "****", "m": {"responses_api_models": {"openai_model": {
        "openai_api_key": "****", "max_output_tokens": "****", "extra_headers": {"X-Auth": "abc"},
        "forward_task_header": "****", "keys": ["****", "****"], "tools": [{"hf_token": "****", "name": "n"}],
        "unset_key": "****"}}}, "client_secret": "****", "db_password": "****", "name": "x"}
