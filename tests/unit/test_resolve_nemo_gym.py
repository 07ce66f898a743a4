"""`resolve` gives what NeMo Gym 0.7 gives for its own example configs (host and port aside).

EXPECTED is the instance tree that NeMo Gym's example_single_tool_call and openai_model configs
define (read from its released package): the same tree must come out of this project's recreated
configs under server_images/, and out of a folder laid out like a NeMo Gym checkout passed as
--search-dir, where NeMo Gym's own relative paths must resolve.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gym_compose.config import ConfigRequest, instances, load, resolve_path

URL, KEY, MODEL = "http://127.0.0.1:9999/v1", "sk-test-key", "gpt-test"
OVERRIDES = [f"++policy_base_url={URL}", f"++policy_api_key={KEY}", f"++policy_model_name={MODEL}"]

NEMO_GYM_JSONL = "resources_servers/example_single_tool_call/data/example.jsonl"
EXPECTED = {
    "example_single_tool_call": {
        "resources_servers": {
            "example_single_tool_call": {
                "entrypoint": "app.py",
                "domain": "agent",
                "verified": False,
                "description": "Basic single-step tool calling",
            }
        }
    },
    "example_single_tool_call_simple_agent": {
        "responses_api_agents": {
            "simple_agent": {
                "entrypoint": "app.py",
                "resources_server": {"type": "resources_servers", "name": "example_single_tool_call"},
                "model_server": {"type": "responses_api_models", "name": "policy_model"},
                "datasets": [{"name": "example", "type": "example", "jsonl_fpath": NEMO_GYM_JSONL}],
            }
        }
    },
    "example_single_tool_call_environment_server": {
        "environment_servers": {
            "legacy_agent": {
                "entrypoint": "app.py",
                "agent_server": {"type": "responses_api_agents", "name": "example_single_tool_call_simple_agent"},
            }
        }
    },
    "policy_model": {
        "responses_api_models": {
            "openai_model": {
                "entrypoint": "app.py",
                "openai_base_url": URL,
                "openai_api_key": KEY,
                "openai_model": MODEL,
                "openai_default_headers": {},
                # OmegaConf's oc.env turns the default `false` into the string 'False', in NeMo Gym too
                "drop_input_reasoning_items": "False",
            }
        }
    },
}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    monkeypatch.delenv("GYM_COMPOSE_SEARCH_PATH", raising=False)
    monkeypatch.delenv("POLICY_DROP_REASONING_ITEMS", raising=False)


def instance_tree(data: dict) -> dict:
    tree = {}
    for instance in instances(data):
        spec = {k: v for k, v in instance.spec.items() if k not in ("host", "port")}
        tree[instance.name] = {instance.server_type: {instance.implementation: spec}}
    return tree


def request(**extra) -> ConfigRequest:
    return ConfigRequest(resources_servers=["example_single_tool_call"], model_types=["openai_model"],
                         overrides=OVERRIDES, **extra)


def test_recreated_configs_give_nemo_gyms_instances_fields_and_values(tmp_path):
    loaded = load(request(), cwd=tmp_path)
    tree = instance_tree(loaded.data)
    # The one deliberate difference: the data file lives under server_images/ in this project.
    dataset = tree["example_single_tool_call_simple_agent"]["responses_api_agents"]["simple_agent"]["datasets"][0]
    assert dataset["jsonl_fpath"] == "server_images/example_single_tool_call/data/example.jsonl"
    dataset["jsonl_fpath"] = NEMO_GYM_JSONL
    assert tree == EXPECTED
    assert (loaded.data["policy_base_url"], loaded.data["policy_model_name"]) == (URL, MODEL)
    assert not loaded.warnings


def write_nemo_gym_checkout(root: Path) -> None:
    """A folder laid out like a NeMo Gym checkout, holding NeMo Gym's two configs and the data file."""
    resources = {k: v for k, v in EXPECTED.items() if k != "policy_model"}
    model = {"policy_model": {"responses_api_models": {"openai_model": {
        "entrypoint": "app.py",
        "openai_base_url": "${policy_base_url}",
        "openai_api_key": "${policy_api_key}",
        "openai_model": "${policy_model_name}",
        "openai_default_headers": {},
        "drop_input_reasoning_items": "${oc.env:POLICY_DROP_REASONING_ITEMS,false}",
    }}}}
    files = {
        "resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml": yaml.safe_dump(resources),
        "responses_api_models/openai_model/configs/openai_model.yaml": yaml.safe_dump(model),
        "environments/example_single_tool_call/config.yaml": yaml.safe_dump(
            {"config_paths": ["resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml"]}),
        NEMO_GYM_JSONL: '{"responses_create_params": {"input": "hi"}}\n',
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)


def test_a_nemo_gym_checkout_as_search_dir_resolves_with_nemo_gyms_paths(tmp_path):
    checkout, elsewhere = tmp_path / "Gym", tmp_path / "work"
    elsewhere.mkdir()
    write_nemo_gym_checkout(checkout)
    loaded = load(request(search_dirs=[checkout]), cwd=elsewhere)
    assert instance_tree(loaded.data) == EXPECTED
    # the checkout's files were chosen over this project's own, and the data path resolves in the checkout
    assert loaded.data["config_paths"][0] == str(checkout / "resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml")
    assert resolve_path(NEMO_GYM_JSONL, loaded.search_roots) == checkout / NEMO_GYM_JSONL


def test_an_environment_config_chains_with_a_path_relative_to_its_checkout(tmp_path, monkeypatch):
    checkout, elsewhere = tmp_path / "Gym", tmp_path / "work"
    elsewhere.mkdir()
    write_nemo_gym_checkout(checkout)
    monkeypatch.setenv("GYM_COMPOSE_SEARCH_PATH", str(checkout))
    loaded = load(ConfigRequest(environments=["example_single_tool_call"], model_types=["openai_model"],
                                overrides=OVERRIDES), cwd=elsewhere)
    assert instance_tree(loaded.data) == EXPECTED


def test_nemo_gym_server_paths_also_find_this_projects_server_images(tmp_path):
    # a NeMo Gym config naming resources_servers/X/... works against the recreated server_images/X/...
    (tmp_path / "mine.yaml").write_text(
        "config_paths: [resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml]\n")
    loaded = load(ConfigRequest(config_files=[Path("mine.yaml")], model_types=["openai_model"], overrides=OVERRIDES),
                  cwd=tmp_path)
    assert "example_single_tool_call" in loaded.data
