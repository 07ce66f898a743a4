"""Merge rules: includes, sibling order, env.yaml, command line, directives."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gym_compose.config import ConfigRequest, instances, load

MODEL = """
policy_model:
  responses_api_models:
    openai_model:
      entrypoint: app.py
      openai_base_url: ${policy_base_url}
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def load_files(tmp_path: Path, *names: str, overrides: list[str] | None = None, **request):
    return load(ConfigRequest(config_files=[Path(n) for n in names], overrides=overrides or [], **request), cwd=tmp_path)


def test_a_file_overrides_what_it_includes_at_any_depth(tmp_path):
    write(tmp_path, "deep.yaml", "value: {a: deep, b: deep, c: deep}\n")
    write(tmp_path, "middle.yaml", "config_paths: [deep.yaml]\nvalue: {b: middle, c: middle}\n")
    write(tmp_path, "top.yaml", "config_paths: [middle.yaml]\nvalue: {c: top}\n")
    data = load_files(tmp_path, "top.yaml").data
    assert data["value"] == {"a": "deep", "b": "middle", "c": "top"}


def test_a_later_sibling_overrides_an_earlier_sibling_and_what_it_included(tmp_path):
    write(tmp_path, "first_include.yaml", "value: {a: first_include, z: first_include}\n")
    write(tmp_path, "first.yaml", "config_paths: [first_include.yaml]\nvalue: {b: first}\n")
    write(tmp_path, "second_include.yaml", "value: {a: second_include, b: second_include}\n")
    write(tmp_path, "second.yaml", "config_paths: [second_include.yaml]\nvalue: {c: second}\n")
    write(tmp_path, "top.yaml", "config_paths: [first.yaml, second.yaml]\n")
    data = load_files(tmp_path, "top.yaml").data
    # second_include is included by the later sibling, so it beats `first` itself
    assert data["value"] == {"a": "second_include", "b": "second_include", "z": "first_include", "c": "second"}


def test_each_file_loads_once_even_when_included_twice(tmp_path):
    write(tmp_path, "shared.yaml", "value: {x: shared}\n")
    write(tmp_path, "a.yaml", "config_paths: [shared.yaml]\nvalue: {x: a}\n")
    write(tmp_path, "b.yaml", "config_paths: [shared.yaml]\n")
    loaded = load_files(tmp_path, "a.yaml", "b.yaml")
    # shared.yaml merged once (under a.yaml); merging it again under b.yaml would have reset x
    assert loaded.data["value"] == {"x": "a"}
    assert loaded.data["config_paths"].count("shared.yaml") == 1
    assert any("shared.yaml" in w for w in loaded.warnings)


def test_mappings_deep_merge_while_lists_and_scalars_replace(tmp_path):
    write(tmp_path, "a.yaml", "value: {map: {x: 1, y: 1}, list: [1, 2, 3], scalar: a}\n")
    write(tmp_path, "b.yaml", "value: {map: {y: 2}, list: [9], scalar: b}\n")
    data = load_files(tmp_path, "a.yaml", "b.yaml").data
    assert data["value"] == {"map": {"x": 1, "y": 2}, "list": [9], "scalar": "b"}


def test_env_yaml_sits_between_the_files_and_the_command_line(tmp_path):
    write(tmp_path, "a.yaml", "value: {file: a, env: a, cli: a}\n")
    write(tmp_path, "env.yaml", "value: {env: env_yaml, cli: env_yaml}\n")
    data = load_files(tmp_path, "a.yaml", overrides=["value.cli=command_line"]).data
    assert data["value"] == {"file": "a", "env": "env_yaml", "cli": "command_line"}


def test_env_yaml_may_name_the_config_paths(tmp_path):
    write(tmp_path, "a.yaml", "value: from_a\n")
    write(tmp_path, "env.yaml", "config_paths: [a.yaml]\n")
    assert load(ConfigRequest(), cwd=tmp_path).data["value"] == "from_a"


def test_override_kinds(tmp_path):
    write(tmp_path, "a.yaml", "value: {keep: 1, change: 1, drop: 1, nested: {x: 1}}\n")
    data = load_files(
        tmp_path, "a.yaml",
        overrides=["value.change=2", "+value.added=3", "++value.nested={y: 2}", "~value.drop", "+extra=[a,b]"],
    ).data
    assert data["value"] == {"keep": 1, "change": 2, "added": 3, "nested": {"x": 1, "y": 2}}
    assert data["extra"] == ["a", "b"]


def test_model_flags_set_the_policy_values(tmp_path):
    write(tmp_path, "model.yaml", MODEL)
    loaded = load_files(tmp_path, "model.yaml", model_name="m1", model_url="http://u", model_api_key="k")
    assert (loaded.data["policy_model_name"], loaded.data["policy_base_url"], loaded.data["policy_api_key"]) == ("m1", "http://u", "k")
    assert loaded.data["policy_model"]["responses_api_models"]["openai_model"]["openai_base_url"] == "http://u"


def test_overrides_beat_the_model_flags(tmp_path):
    write(tmp_path, "model.yaml", MODEL)
    data = load_files(tmp_path, "model.yaml", model_url="http://flag", overrides=["++policy_base_url=http://override"]).data
    assert data["policy_base_url"] == "http://override"


def test_config_files_load_before_selector_files(tmp_path):
    write(tmp_path, "server_images/thing/configs/thing.yaml", "value: selector\n")
    write(tmp_path, "mine.yaml", "value: config_file\n")
    loaded = load(ConfigRequest(config_files=[Path("mine.yaml")], resources_servers=["thing"]), cwd=tmp_path)
    assert loaded.data["value"] == "selector"


def test_selectors_load_in_nemo_gym_category_order_not_command_line_order(tmp_path):
    write(tmp_path, "benchmarks/bench/config.yaml", "value: benchmark\n")
    write(tmp_path, "resources_servers/res/configs/res.yaml", "value: resources_server\n")
    loaded = load(ConfigRequest(resources_servers=["res"], benchmarks=["bench"]), cwd=tmp_path)
    assert loaded.data["value"] == "resources_server"


def test_no_model_means_the_mock_model_with_a_notice(tmp_path):
    loaded = load(ConfigRequest(), cwd=tmp_path)
    (model,) = [i for i in instances(loaded.data) if i.server_type == "responses_api_models"]
    assert (model.name, model.implementation) == ("policy_model", "mock_model")
    assert any("mock model" in w for w in loaded.warnings)


def test_a_model_url_without_a_model_type_means_openai_model(tmp_path):
    loaded = load(ConfigRequest(model_url="http://u/v1", model_name="m", model_api_key="k"), cwd=tmp_path)
    (model,) = [i for i in instances(loaded.data) if i.server_type == "responses_api_models"]
    assert (model.name, model.implementation) == ("policy_model", "openai_model")
    assert model.spec["openai_base_url"] == "http://u/v1"
    assert not any("mock model" in w for w in loaded.warnings)


def test_a_judge_model_beside_an_agent_on_policy_model_still_gets_the_mock(tmp_path):
    write(tmp_path, "bench.yaml", """
        judge_model:
          responses_api_models:
            openai_model: {entrypoint: app.py, openai_base_url: http://judge/v1, openai_api_key: k, openai_model: j}
        res:
          resources_servers:
            r: {entrypoint: app.py, domain: math, judge_model_server: {type: responses_api_models, name: judge_model}}
        agent:
          responses_api_agents:
            simple_agent:
              entrypoint: app.py
              resources_server: {type: resources_servers, name: res}
              model_server: {type: responses_api_models, name: policy_model}
    """)
    loaded = load_files(tmp_path, "bench.yaml")
    models = {i.name: i.implementation for i in instances(loaded.data) if i.server_type == "responses_api_models"}
    assert models == {"policy_model": "mock_model", "judge_model": "openai_model"}
    assert any("mock model" in w for w in loaded.warnings)


def test_a_model_under_another_name_that_the_agents_use_gets_no_mock(tmp_path):
    write(tmp_path, "a.yaml", """
        my_model:
          responses_api_models:
            openai_model: {entrypoint: app.py, openai_base_url: http://m/v1, openai_api_key: k, openai_model: m}
        res:
          resources_servers:
            r: {entrypoint: app.py, domain: math}
        agent:
          responses_api_agents:
            simple_agent:
              entrypoint: app.py
              resources_server: {type: resources_servers, name: res}
              model_server: {type: responses_api_models, name: my_model}
    """)
    loaded = load_files(tmp_path, "a.yaml")
    assert "policy_model" not in loaded.data and not any("mock model" in w for w in loaded.warnings)


def test_a_config_that_defines_a_model_gets_no_mock(tmp_path):
    write(tmp_path, "model.yaml", MODEL)
    loaded = load_files(tmp_path, "model.yaml", model_url="http://u")
    assert [i.implementation for i in instances(loaded.data)] == ["openai_model"]
    assert not any("mock model" in w for w in loaded.warnings)


def test_inherit_from_starts_from_the_source_merges_local_keys_and_removes_the_source(tmp_path):
    write(tmp_path, "a.yaml", """
        base:
          resources_servers:
            impl: {entrypoint: app.py, domain: math, x: 1, y: 1}
        child:
          _inherit_from: base
          resources_servers:
            impl: {y: 2}
    """)
    data = load_files(tmp_path, "a.yaml").data
    assert "base" not in data
    assert data["child"]["resources_servers"]["impl"] == {"entrypoint": "app.py", "domain": "math", "x": 1, "y": 2}


def test_inherit_from_runs_after_every_source_merged(tmp_path):
    # the source is changed by a later file and by the command line; the child sees both changes
    write(tmp_path, "a.yaml", "base: {x: 1, y: 1, z: 1}\nchild: {_inherit_from: base}\n")
    write(tmp_path, "b.yaml", "base: {y: 2}\n")
    data = load_files(tmp_path, "a.yaml", "b.yaml", overrides=["base.z=3"]).data
    assert data["child"] == {"x": 1, "y": 2, "z": 3}
    assert "base" not in data


def test_copy_keeps_the_source_and_nests(tmp_path):
    write(tmp_path, "a.yaml", """
        base: {settings: {a: 1, b: 1}}
        other:
          settings:
            _copy: base.settings
            b: 2
    """)
    data = load_files(tmp_path, "a.yaml").data
    assert data["base"] == {"settings": {"a": 1, "b": 1}}
    assert data["other"] == {"settings": {"a": 1, "b": 2}}


def test_string_forms_of_inherit_and_copy(tmp_path):
    write(tmp_path, "a.yaml", "a: {x: 1}\nb: {y: 2}\nc: ${inherit_from:a}\nd: ${copy:b}\n")
    data = load_files(tmp_path, "a.yaml").data
    assert (data.get("a"), data["b"], data["c"], data["d"]) == (None, {"y": 2}, {"x": 1}, {"y": 2})


def test_delete_key_removes_local_and_inherited_keys(tmp_path):
    write(tmp_path, "a.yaml", """
        base: {keep: 1, inherited_drop: 1}
        child: {_inherit_from: base, local_drop: 1, _delete_key: "local_drop, inherited_drop"}
    """)
    assert load_files(tmp_path, "a.yaml").data["child"] == {"keep": 1}


def test_inherit_chains(tmp_path):
    write(tmp_path, "a.yaml", "top: {t: 1}\nmiddle: {_inherit_from: top, m: 1}\nleaf: {_inherit_from: middle, l: 1}\n")
    data = load_files(tmp_path, "a.yaml").data
    assert data["leaf"] == {"t": 1, "m": 1, "l": 1}
    assert "top" not in data and "middle" not in data


def test_interpolations_resolve_across_files(tmp_path):
    write(tmp_path, "a.yaml", "value: ${shared.x}\n")
    write(tmp_path, "b.yaml", "shared: {x: from_b}\n")
    assert load_files(tmp_path, "a.yaml", "b.yaml").data["value"] == "from_b"


def test_agent_without_environment_server_gets_a_generated_one(tmp_path):
    write(tmp_path, "a.yaml", MODEL + textwrap.dedent("""
        res:
          resources_servers:
            r: {entrypoint: app.py, domain: math}
        my_agent:
          responses_api_agents:
            simple_agent:
              entrypoint: app.py
              resources_server: {type: resources_servers, name: res}
              model_server: {type: responses_api_models, name: policy_model}
    """))
    loaded = load_files(tmp_path, "a.yaml", model_url="http://u")
    generated = loaded.data["my_environment_server"]["environment_servers"]["legacy_agent"]  # NeMo Gym 0.7's name
    assert generated["agent_server"] == {"type": "responses_api_agents", "name": "my_agent"}
    assert any("DEPRECATED" in w and "my_environment_server" in w for w in loaded.warnings)


@pytest.mark.parametrize("agent, agent_type, expected", [
    ("workplace_assistant_simple_agent", "simple_agent", "workplace_assistant_environment_server"),
    ("wordle_agent", "gymnasium_agent", "wordle_environment_server"),
    ("simple_agent", "simple_agent", "simple_agent_environment_server"),
    ("solver", "simple_agent", "solver_environment_server"),
    ("math_simple_agent_", "simple_agent", "math_simple_agent_environment_server"),
])
def test_generated_environment_server_names_follow_nemo_gym(agent, agent_type, expected):
    from gym_compose.config.legacy import legacy_environment_server_name

    assert legacy_environment_server_name(agent, agent_type) == expected


def test_a_taken_environment_server_name_falls_back_to_the_agent_name(tmp_path):
    write(tmp_path, "a.yaml", MODEL + textwrap.dedent("""
        math_environment_server:
          resources_servers:
            r: {entrypoint: app.py, domain: math}
        math_simple_agent:
          responses_api_agents:
            simple_agent:
              entrypoint: app.py
              resources_server: {type: resources_servers, name: math_environment_server}
              model_server: {type: responses_api_models, name: policy_model}
        solver_simple_agent:
          responses_api_agents:
            simple_agent:
              entrypoint: app.py
              resources_server: {type: resources_servers, name: math_environment_server}
              model_server: {type: responses_api_models, name: policy_model}
        solver_agent:
          responses_api_agents:
            simple_agent:
              entrypoint: app.py
              resources_server: {type: resources_servers, name: math_environment_server}
              model_server: {type: responses_api_models, name: policy_model}
    """))
    data = load_files(tmp_path, "a.yaml", model_url="http://u").data
    fronted = {name: block["environment_servers"]["legacy_agent"]["agent_server"]["name"]
               for name, block in data.items() if isinstance(block, dict) and "environment_servers" in block}
    assert fronted == {"math_simple_agent_environment_server": "math_simple_agent",  # its own name is taken
                       "solver_environment_server": "solver_simple_agent",
                       "solver_agent_environment_server": "solver_agent"}  # taken by the one generated before


def test_an_agent_with_an_environment_server_gets_none_generated(tmp_path):
    write(tmp_path, "a.yaml", MODEL + textwrap.dedent("""
        res:
          resources_servers:
            r: {entrypoint: app.py, domain: math}
        my_agent:
          responses_api_agents:
            simple_agent:
              entrypoint: app.py
              resources_server: {type: resources_servers, name: res}
        front:
          environment_servers:
            legacy_agent:
              entrypoint: app.py
              agent_server: {type: responses_api_agents, name: my_agent}
    """))
    loaded = load_files(tmp_path, "a.yaml", model_url="http://u")
    assert "my_agent_environment_server" not in loaded.data
    assert not any("DEPRECATED" in w for w in loaded.warnings)
