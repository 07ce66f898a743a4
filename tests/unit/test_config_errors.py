"""Bad input: each gives one UserError that says what is wrong and where."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gym_compose.config import ConfigRequest, load
from gym_compose.errors import UserError


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def load_error(tmp_path: Path, *names: str, overrides: list[str] | None = None, **request) -> str:
    with pytest.raises(UserError) as caught:
        load(ConfigRequest(config_files=[Path(n) for n in names], overrides=overrides or [], **request), cwd=tmp_path)
    return str(caught.value)


RESOURCES = """
res:
  resources_servers:
    r: {entrypoint: app.py, domain: math}
"""


def test_yaml_syntax_error_names_file_line_and_parser_message(tmp_path):
    path = write(tmp_path, "bad.yaml", "a: 1\nb: [1, 2\nc: 3\n")
    message = load_error(tmp_path, "bad.yaml")
    assert str(path) in message and "line 3" in message and "expected ',' or ']'" in message


def test_included_missing_file_names_the_path_the_includer_and_every_root_tried(tmp_path):
    extra = tmp_path / "extra_root"
    extra.mkdir()
    top = write(tmp_path, "top.yaml", "config_paths: [nowhere/missing.yaml]\n")
    message = load_error(tmp_path, "top.yaml", search_dirs=[extra])
    assert "nowhere/missing.yaml" in message and str(top) in message
    assert str(extra / "nowhere/missing.yaml") in message and str(tmp_path / "nowhere/missing.yaml") in message


def test_unknown_selector_lists_close_matches_and_paths_tried(tmp_path):
    write(tmp_path, "resources_servers/weather_tool/configs/weather_tool.yaml", RESOURCES)
    with pytest.raises(UserError) as caught:
        load(ConfigRequest(resources_servers=["weather_tol"]), cwd=tmp_path)
    assert "'weather_tool'" in str(caught.value)
    assert str(tmp_path / "resources_servers/weather_tol/configs/weather_tol.yaml") in str(caught.value)


def test_every_unset_value_is_listed_as_an_override(tmp_path):
    write(tmp_path, "a.yaml", "a: {x: '???', y: {z: '???'}}\nb: ???\nc: 1\n")
    message = load_error(tmp_path, "a.yaml")
    for path in ("a.x", "a.y.z", "b"):
        assert f"++{path}=<value>" in message
    assert "++c=" not in message


def test_unset_value_overridden_later_is_not_an_error(tmp_path):
    write(tmp_path, "a.yaml", "a: {x: '???'}\n")
    assert load(ConfigRequest(config_files=[Path("a.yaml")], overrides=["a.x=5"]), cwd=tmp_path).data["a"] == {"x": 5}


def test_interpolation_with_no_target_names_it(tmp_path):
    write(tmp_path, "a.yaml", "a: {url: '${policy_base_url}'}\n")
    message = load_error(tmp_path, "a.yaml")
    assert "policy_base_url" in message and "a.url" in message


def test_override_of_a_missing_key_suggests_the_close_one(tmp_path):
    write(tmp_path, "a.yaml", "value: {timeout: 1}\n")
    message = load_error(tmp_path, "a.yaml", overrides=["value.timeot=2"])
    assert "'value.timeout'" in message and "++value.timeot=2" in message


def test_unparsable_override_is_a_clear_error(tmp_path):
    assert "cannot parse override" in load_error(tmp_path, overrides=["a=[1"])


def test_two_server_types_in_one_instance(tmp_path):
    write(tmp_path, "a.yaml", """
        both:
          resources_servers: {r: {entrypoint: app.py, domain: math}}
          responses_api_agents: {a: {entrypoint: app.py}}
    """)
    message = load_error(tmp_path, "a.yaml")
    assert "'both'" in message and "exactly one" in message and str(tmp_path / "a.yaml") in message


def test_two_implementations_in_one_instance(tmp_path):
    write(tmp_path, "a.yaml", "two:\n  resources_servers:\n    a: {entrypoint: app.py, domain: math}\n    b: {entrypoint: app.py, domain: math}\n")
    assert "exactly one implementation, found 2 (a, b)" in load_error(tmp_path, "a.yaml")


def test_misspelt_server_type_gets_did_you_mean(tmp_path):
    write(tmp_path, "a.yaml", "res:\n  resource_servers:\n    r: {entrypoint: app.py, domain: math}\n")
    assert "did you mean 'resources_servers'" in load_error(tmp_path, "a.yaml")


def test_resources_server_needs_a_known_domain(tmp_path):
    write(tmp_path, "a.yaml", "res:\n  resources_servers:\n    r: {entrypoint: app.py}\n")
    assert "needs a 'domain'" in load_error(tmp_path, "a.yaml")
    write(tmp_path, "b.yaml", "res:\n  resources_servers:\n    r: {entrypoint: app.py, domain: mathh}\n")
    assert "did you mean 'math'" in load_error(tmp_path, "b.yaml")


def test_misspelt_field_gets_did_you_mean(tmp_path):
    write(tmp_path, "a.yaml", RESOURCES + textwrap.dedent("""
        agent:
          responses_api_agents:
            simple_agent:
              entrypoint: app.py
              resource_server: {type: resources_servers, name: res}
    """))
    assert "did you mean 'resources_server'" in load_error(tmp_path, "a.yaml")


def test_reference_to_an_unknown_instance_suggests_a_close_name(tmp_path):
    write(tmp_path, "a.yaml", RESOURCES + textwrap.dedent("""
        agent:
          responses_api_agents:
            simple_agent:
              entrypoint: app.py
              resources_server: {type: resources_servers, name: ress}
    """))
    message = load_error(tmp_path, "a.yaml")
    assert "agent.responses_api_agents.simple_agent.resources_server.name" in message
    assert "did you mean 'res'" in message and str(tmp_path / "a.yaml") in message


def test_reference_to_an_instance_of_the_wrong_type(tmp_path):
    write(tmp_path, "a.yaml", RESOURCES + textwrap.dedent("""
        agent:
          responses_api_agents:
            simple_agent:
              entrypoint: app.py
              resources_server: {type: resources_servers, name: res}
              model_server: {type: responses_api_models, name: res}
    """))
    assert "'res' is a resources_servers instance, not responses_api_models" in load_error(tmp_path, "a.yaml")


def test_reference_field_with_the_wrong_type(tmp_path):
    write(tmp_path, "a.yaml", RESOURCES + textwrap.dedent("""
        agent:
          responses_api_agents:
            simple_agent:
              entrypoint: app.py
              resources_server: {type: responses_api_models, name: res}
    """))
    assert "resources_server must have type resources_servers" in load_error(tmp_path, "a.yaml")


def test_an_overlay_alone_is_no_server_as_nemo_gym_reports_it(tmp_path):
    from gym_compose.plan.planner import plan_stack

    write(tmp_path, "a.yaml", "res:\n  resources_servers:\n    r: {domain: math}\n")
    loaded = load(ConfigRequest(config_files=[Path("a.yaml")]), cwd=tmp_path)  # resolves, as NeMo Gym's does
    assert "policy_model" not in loaded.data  # no server, so no default model either
    with pytest.raises(UserError) as caught:
        plan_stack(loaded.data, loaded.search_roots)
    message = str(caught.value)
    assert message.startswith("No server instances are configured, so there is nothing to run")  # NeMo Gym's words
    assert "res.resources_servers.r" in message and "no 'entrypoint'" in message


def test_a_misspelt_entrypoint_is_an_error(tmp_path):
    write(tmp_path, "a.yaml", RESOURCES + "res2:\n  resources_servers:\n    r: {entry_point: app.py, domain: math}\n")
    assert "missing 'entrypoint' (did you mean" in load_error(tmp_path, "a.yaml")


def test_a_block_without_entrypoint_beside_servers_is_data_with_a_note(tmp_path):
    from gym_compose.config import instances

    write(tmp_path, "a.yaml", RESOURCES + "extra:\n  resources_servers:\n    r: {domain: math, note: 1}\n")
    loaded = load(ConfigRequest(config_files=[Path("a.yaml")]), cwd=tmp_path)
    assert [i.name for i in instances(loaded.data) if i.server_type == "resources_servers"] == ["res"]
    assert loaded.data["extra"]["resources_servers"]["r"]["note"] == 1  # kept as data, as NeMo Gym keeps it
    assert any("extra.resources_servers.r" in w and "no 'entrypoint'" in w for w in loaded.warnings)


def test_dataset_with_an_unknown_type(tmp_path):
    write(tmp_path, "a.yaml", "res:\n  resources_servers:\n    r:\n      entrypoint: app.py\n      domain: math\n"
                              "      datasets: [{name: d, type: exampel, jsonl_fpath: d.jsonl}]\n")
    assert "did you mean 'example'" in load_error(tmp_path, "a.yaml")


def test_error_switch_turns_a_generated_environment_server_into_an_error(tmp_path):
    write(tmp_path, "a.yaml", RESOURCES + textwrap.dedent("""
        error_on_agent_without_environment_server: true
        lonely_agent:
          responses_api_agents:
            simple_agent:
              entrypoint: app.py
              resources_server: {type: resources_servers, name: res}
    """))
    assert "lonely_agent" in load_error(tmp_path, "a.yaml")


def test_inherit_from_an_unknown_path(tmp_path):
    write(tmp_path, "a.yaml", "base: {x: 1}\nchild: {_inherit_from: bsae}\n")
    message = load_error(tmp_path, "a.yaml")
    assert "'bsae'" in message and "did you mean 'base'" in message


def test_delete_of_a_key_that_never_arrives(tmp_path):
    # NeMo Gym ignores it in a plain mapping (a warning here), and fails after an _inherit_from
    write(tmp_path, "a.yaml", "child: {x: 1, _delete_key: y}\n")
    loaded = load(ConfigRequest(config_files=[Path("a.yaml")]), cwd=tmp_path)
    assert loaded.data["child"] == {"x": 1}
    assert any("cannot delete 'y'" in w for w in loaded.warnings)
    write(tmp_path, "b.yaml", "base: {x: 1}\nchild: {_inherit_from: base, _delete_key: xx}\n")
    assert "cannot delete 'xx'" in load_error(tmp_path, "b.yaml")


def test_a_plain_field_that_resembles_a_known_one_is_left_alone(tmp_path):
    write(tmp_path, "a.yaml", """
        res:
          resources_servers:
            r:
              entrypoint: app.py
              domain: math
              dataset: humaneval
              judge_model_server: {type: responses_api_models, name: policy_model}
    """)
    spec = load(ConfigRequest(config_files=[Path("a.yaml")]), cwd=tmp_path).data["res"]["resources_servers"]["r"]
    assert spec["dataset"] == "humaneval"


def test_config_paths_must_be_a_list(tmp_path):
    write(tmp_path, "a.yaml", "config_paths: {a: b}\n")
    assert "config_paths must be a list" in load_error(tmp_path, "a.yaml")


def test_top_level_list_file(tmp_path):
    write(tmp_path, "a.yaml", "- a\n- b\n")
    assert "must hold a mapping" in load_error(tmp_path, "a.yaml")


def test_an_unset_value_deleted_or_inherited_over_is_not_reported(tmp_path):
    write(tmp_path, "a.yaml", """
        base: {name: '???', keep: 1}
        child: {_inherit_from: base, name: set}
        other: {unset: '???', _delete_key: unset}
    """)
    data = load(ConfigRequest(config_files=[Path("a.yaml")]), cwd=tmp_path).data
    assert data["child"] == {"name": "set", "keep": 1} and data["other"] == {}


def test_inheriting_an_unset_value_reports_the_target(tmp_path):
    write(tmp_path, "a.yaml", "base: ???\nchild: ${inherit_from:base}\n")
    assert "++child=<value>" in load_error(tmp_path, "a.yaml")
