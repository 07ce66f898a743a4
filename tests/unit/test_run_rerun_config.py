"""A rerun's config: the manifest's resolved config with its masked secrets asked for again."""

import json

import pytest

from gym_compose.config.redact import redact
from gym_compose.errors import UserError
from gym_compose.runs.provenance import secret_sources
from gym_compose.runs.rerun_config import read_manifest, rerun_config

CONFIG = {
    "config_paths": ["benchmarks/gsm8k/config.yaml"],
    "policy_api_key": "sk-live-1",
    "policy_model": {"responses_api_models": {"openai_model": {"openai_api_key": "sk-live-1", "openai_model": "m"}}},
    "tools": {"resources_servers": {"search": {"hf_token": "hf-2"}}},
}
MANIFEST = {"resolved_config": redact(CONFIG), "images": {}, "provenance": {"secrets": secret_sources(CONFIG)}}


def test_the_model_key_fills_every_place_it_went_and_config_paths_go(tmp_path):
    config = rerun_config(MANIFEST, {"policy_api_key": "sk-again", "tools.resources_servers.search.hf_token": "hf-x"},
                          tmp_path)
    assert config["policy_model"]["responses_api_models"]["openai_model"]["openai_api_key"] == "sk-again"
    assert config["policy_api_key"] == "sk-again"
    assert config["tools"]["resources_servers"]["search"]["hf_token"] == "hf-x"
    assert "config_paths" not in config and MANIFEST["resolved_config"]["policy_api_key"] == "****"


def test_env_yaml_fills_what_the_command_line_does_not(tmp_path):
    (tmp_path / "env.yaml").write_text("policy_api_key: sk-env\npolicy_base_url: http://elsewhere\n")
    config = rerun_config(MANIFEST, {"tools.resources_servers.search.hf_token": "hf-x"}, tmp_path)
    assert config["policy_api_key"] == "sk-env"
    assert "policy_base_url" not in config  # env.yaml fills secrets only; the config is the run's


def test_a_missing_secret_is_named_with_how_to_give_it(tmp_path):
    with pytest.raises(UserError) as caught:
        rerun_config(MANIFEST, {}, tmp_path)
    message = str(caught.value) + str(caught.value.hint)
    path = "policy_model.responses_api_models.openai_model.openai_api_key"
    assert f"{path} (the run took it from policy_api_key)" in message
    assert "tools.resources_servers.search.hf_token" in message and "--model-api-key KEY" in message


def test_a_folder_without_manifest_or_rows_is_refused(tmp_path):
    with pytest.raises(UserError, match="has no manifest.json"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps(MANIFEST))
    with pytest.raises(UserError, match="has no input.jsonl"):
        read_manifest(tmp_path)
    (tmp_path / "input.jsonl").write_text("{}\n")
    assert read_manifest(tmp_path)["images"] == {}
