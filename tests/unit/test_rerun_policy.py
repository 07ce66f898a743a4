"""`eval rerun` gives a manifest's docker settings no more than a fresh `up` gives (issue 22): a
manifest edited to mount a host folder, add SYS_ADMIN and run as root reran with all three."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gym_compose.config import load
from gym_compose.config.redact import redact
from gym_compose.contract import SERVER_USER
from gym_compose.engine.targets.registry import TargetOptions
from gym_compose.plan.model import StackOptions
from gym_compose.plan.planner import plan_stack
from gym_compose.runs import rerun
from gym_compose.runs.rerun_policy import apply_rerun_policy, is_root_user

REPO = Path(__file__).resolve().parents[2]
SERVER = "example_single_tool_call"
DOCKER_PATH = f"{SERVER}.resources_servers.{SERVER}.docker"
EDITED = {"volumes": ["/etc:/x"], "user": "0:0", "cap_add": ["SYS_ADMIN"], "read_only": False, "memory": "1g"}


def run_folder(tmp_path: Path) -> Path:
    """A finished run's folder whose manifest was edited to widen one server's docker settings."""
    from gym_compose.config.request import ConfigRequest

    data = load(ConfigRequest(resources_servers=[SERVER]), cwd=REPO).data
    data[SERVER]["resources_servers"][SERVER]["docker"] = dict(EDITED)
    run_dir = tmp_path / "calc-20261130-070000"
    run_dir.mkdir()
    (run_dir / "input.jsonl").write_text((REPO / f"server_images/{SERVER}/data/example.jsonl").read_text())
    (run_dir / "manifest.json").write_text(json.dumps({"resolved_config": redact(data), "images": {},
                                                       "collection": {"collector_args": []}}))
    return run_dir


def rerun_service(tmp_path: Path, monkeypatch, overrides: list[str]) -> tuple[Any, str]:
    """The planned service of the edited server, as `eval rerun` would start it; and what it said."""
    said: list[str] = []
    seen: dict[str, Any] = {}
    monkeypatch.setattr(rerun, "pin_images", lambda manifest, rebuild, ask: ({}, {}))
    monkeypatch.setattr("gym_compose.console.say", said.append)

    def run_collection(args, collection, **_):
        loaded = load(args.request, cwd=REPO)
        seen["stack"] = plan_stack(loaded.data, loaded.search_roots, StackOptions(project="p"))
        return 0

    monkeypatch.setattr("gym_compose.runs.eval_run.run_collection", run_collection)
    assert rerun.rerun_command(run_folder(tmp_path), (StackOptions(project="p"), TargetOptions()), overrides, None, None, None,
                               keep=False, rebuild=False, cwd=tmp_path) == 0
    service = next(s for s in seen["stack"].services if s.instance == SERVER)
    return service, "\n".join(said)


def test_a_rerun_leaves_out_host_mounts_capabilities_root_and_a_writable_root_and_says_so(tmp_path, monkeypatch):
    service, said = rerun_service(tmp_path, monkeypatch, [])
    overrides = service.overrides
    assert overrides.volumes == () and overrides.cap_add == () and overrides.user is None
    assert overrides.read_only is None  # the role's default: read-only
    assert service.limits.memory == "1g"  # a limit is no widening: kept, and named
    for key, value in (("volumes", '["/etc:/x"]'), ("user", '"0:0"'), ("cap_add", '["SYS_ADMIN"]')):
        assert f"{DOCKER_PATH}.{key}: {value}" in said
        assert f"'++{DOCKER_PATH}.{key}={value}'" in said  # how to keep it, ready to paste
    assert "not the defaults" in said and f'{SERVER}: memory="1g"' in said


def test_what_the_user_gives_on_the_rerun_command_line_is_theirs_to_give(tmp_path, monkeypatch):
    service, _ = rerun_service(tmp_path, monkeypatch, [f"++{DOCKER_PATH}.cap_add=[SYS_ADMIN]"])
    assert service.overrides.cap_add == ("SYS_ADMIN",)
    assert service.overrides.user is None and service.overrides.volumes == ()


@pytest.mark.parametrize("user, root", [("0", True), ("root", True), ("0:0", True), ("1000:0", True),
                                         ("root:root", True), (SERVER_USER, False), ("1000:1000", False)])
def test_root_is_the_user_or_its_group(user, root):
    assert is_root_user(user) is root


def test_a_config_without_docker_settings_says_nothing():
    config = {"a": {"resources_servers": {"x": {"entrypoint": "app.py", "docker": {"user": "1000:1000"}}}},
              "b": {"responses_api_agents": {"y": {"entrypoint": "app.py"}}}}
    left_out, kept = apply_rerun_policy(config)
    assert left_out == [] and kept == ['a: user="1000:1000"']
    assert config["a"]["resources_servers"]["x"]["docker"] == {"user": "1000:1000"}
