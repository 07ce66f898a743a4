"""Values a config takes from the host's environment (`${oc.env:VAR}`) are masked like secrets
wherever the config is shown or recorded (issue 22: `resolve` and the manifest printed them in
fields they do not mask); a rerun evaluates their expressions again against its own environment."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import yaml

from gym_compose.cli.lookup import resolve_command
from gym_compose.config import ConfigRequest, load
from gym_compose.config.host_environment import environment_paths
from gym_compose.engine import engine_info
from gym_compose.runs import manifest as manifest_module
from gym_compose.runs.rerun_config import rerun_config

REPO = Path(__file__).resolve().parents[2]
VALUE = "host-value-7f3a9c"  # what the host's variable holds: must appear in no output
SERVER = "example_single_tool_call"
CONFIG = f"""
marker:
  value: ${{oc.env:GYMC_TEST_HOST_VALUE}}
  sibling: ${{.value}}
  joined: prefix-${{oc.env:GYMC_TEST_HOST_VALUE}}-suffix
  fallback: ${{oc.env:GYMC_TEST_UNSET_VARIABLE,kept-from-the-config}}
  plain: nothing-from-the-host
{SERVER}:
  resources_servers:
    {SERVER}:
      docker:
        environment:
          FROM_HOST: ${{marker.value}}
"""


def write_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    return path


def request(tmp_path: Path) -> ConfigRequest:
    return ConfigRequest(config_files=[write_config(tmp_path)], resources_servers=[SERVER])


def test_resolve_masks_every_value_the_host_environment_gave(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GYMC_TEST_HOST_VALUE", VALUE)
    monkeypatch.delenv("GYMC_TEST_UNSET_VARIABLE", raising=False)
    resolve_command(request(tmp_path), cwd=REPO)
    captured = capsys.readouterr()
    assert VALUE not in captured.out + captured.err
    shown = yaml.safe_load(captured.out)
    assert shown["marker"] == {"value": "****", "sibling": "****", "joined": "****",
                               "fallback": "kept-from-the-config", "plain": "nothing-from-the-host"}
    assert shown[SERVER]["resources_servers"][SERVER]["docker"]["environment"] == {"FROM_HOST": "****"}
    assert "values from the host's environment (GYMC_TEST_HOST_VALUE) are shown as '****'" in captured.err


def test_the_manifest_and_its_compose_copy_mask_them_and_keep_their_expressions(tmp_path, monkeypatch):
    from gym_compose.plan.model import StackOptions
    from gym_compose.plan.planner import plan_stack
    from gym_compose.render.compose import RenderOptions, write_project

    monkeypatch.setenv("GYMC_TEST_HOST_VALUE", VALUE)
    monkeypatch.setattr(engine_info, "engine_versions", lambda: {"engine": "test"})
    loaded = load(request(tmp_path), cwd=REPO)
    assert loaded.data["marker"]["joined"] == f"prefix-{VALUE}-suffix"  # the stack itself gets the value
    stack = plan_stack(loaded.data, loaded.search_roots, StackOptions(project="p"))
    compose_file = write_project(stack, {"base": "gym-compose/base:test"}, tmp_path / "project", None,
                                 RenderOptions())
    assert VALUE in compose_file.read_text()  # the containers' config holds it, as documented
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = {"collection": {"collector_args": []}, "datasets": [], "rerun_of": None}
    manifest_module.write_manifest(run_dir, loaded.data, compose_file, {}, datetime.now(timezone.utc), 0, record,
                                   manifest_module.EngineFacts({}), loaded.from_environment)
    for name in ("manifest.json", "compose.yaml"):
        assert VALUE not in (run_dir / name).read_text(), name
    written = json.loads((run_dir / "manifest.json").read_text())
    assert written["resolved_config"]["marker"]["sibling"] == "****"
    assert written["resolved_config"]["marker"]["fallback"] == "kept-from-the-config"
    assert written["provenance"]["environment"]["marker.joined"] == "prefix-${oc.env:GYMC_TEST_HOST_VALUE}-suffix"
    copied = yaml.safe_load((run_dir / "compose.yaml").read_text())
    environment = copied["services"]["example-single-tool-call"]["environment"]
    assert environment["FROM_HOST"] == "****"
    assert yaml.safe_load(environment["NEMO_GYM_CONFIG_DICT"])["marker"]["value"] == "****"


def test_a_rerun_evaluates_the_recorded_expressions_in_its_own_environment_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setenv("GYMC_TEST_HOST_VALUE", VALUE)
    loaded = load(request(tmp_path), cwd=REPO)
    from gym_compose.config.redact import redact

    recorded = redact(loaded.data, loaded.from_environment)
    recorded["marker"]["plain"] = "${oc.env:GYMC_TEST_PLANTED}"  # an edited manifest: taken as it is
    manifest = {"resolved_config": recorded, "images": {}, "provenance": {
        "environment": {".".join(path): text for path, text in loaded.from_environment.items()}}}
    monkeypatch.setenv("GYMC_TEST_HOST_VALUE", "this-machine")
    monkeypatch.setenv("GYMC_TEST_PLANTED", "must-not-be-read")
    config = rerun_config(manifest, {}, tmp_path)
    rerun_file = tmp_path / "rerun.yaml"
    rerun_file.write_text(yaml.safe_dump(config))
    again = load(ConfigRequest(config_files=[rerun_file]), cwd=REPO).data["marker"]
    assert again == {"value": "this-machine", "sibling": "this-machine", "joined": "prefix-this-machine-suffix",
                     "fallback": "kept-from-the-config", "plain": "${oc.env:GYMC_TEST_PLANTED}"}


def test_references_are_followed_through_nodes_and_blocks():
    raw = {"a": {"key": "${oc.env:SET}", "unset": "${oc.env:UNSET,x}"}, "b": "${a}", "c": {"d": "${b.key}"},
           "e": [1, "${oc.select:a.key,none}"], "f": "${a.unset}", "g": {"h": "${..a.key}"}}
    found = environment_paths(raw, {"SET": "1"})
    assert set(found) == {("a", "key"), ("b",), ("c", "d"), ("e", "1"), ("g", "h")}
