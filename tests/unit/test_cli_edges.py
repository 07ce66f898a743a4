"""Edges of the command line that an adversarial pass found (issue 22): `sandbox exec NAME -p P --
cmd` ran `-p P -- cmd` in the default project; `view --port 99999` printed a traceback; `up
--input DIR` said the directory "does not exist"; the `view` server answered any Host."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gym_compose.errors import UserError
from tests.support.cli import REPO, run_cli

EXAMPLE_ROWS = REPO / "server_images/example_single_tool_call/data/example.jsonl"


@pytest.fixture
def exec_calls(monkeypatch) -> list[tuple[str, str | None, list[str]]]:
    import gym_compose.stack.sandbox_commands as commands

    calls: list[tuple[str, str | None, list[str]]] = []
    monkeypatch.setattr(commands, "sandbox_exec", lambda project, name, command: calls.append(
        (project, name, command)) or 0)
    return calls


@pytest.mark.parametrize("argv, project, command", [
    (["box", "-p", "mine", "--", "ls", "-la"], "mine", ["ls", "-la"]),
    (["box", "--project", "mine", "--", "ls"], "mine", ["ls"]),
    (["box", "--project=mine", "--", "ls"], "mine", ["ls"]),
    (["-p", "mine", "box", "--", "ls", "-p", "x"], "mine", ["ls", "-p", "x"]),  # the command's own -p stays its own
    (["box", "--", "ls", "-la"], "gym-compose", ["ls", "-la"]),
    (["box", "ls", "-la"], "gym-compose", ["ls", "-la"]),
])
def test_sandbox_exec_takes_the_project_option_after_the_sandbox(exec_calls, monkeypatch, argv, project, command):
    from typer.testing import CliRunner

    from gym_compose.cli.main import app

    monkeypatch.delenv("GYM_COMPOSE_PROJECT", raising=False)
    result = CliRunner().invoke(app, ["sandbox", "exec", *argv])
    assert result.exit_code == 0, result.output
    assert exec_calls == [(project, "box", command)]


@pytest.mark.parametrize("argv, says", [
    (["box", "-p", "Bad!", "--", "ls"], "invalid project name 'Bad!'"),
    (["box", "--frob", "--", "ls"], "unknown option '--frob' before `--`"),
    (["box", "-p"], "-p needs a project name"),
])
def test_sandbox_exec_refuses_bad_options_before_the_command(exec_calls, argv, says):
    from gym_compose.cli.shared_options import exec_arguments

    with pytest.raises(UserError, match=says.replace("(", r"\(")):
        exec_arguments("gym-compose", argv[1:])
    assert exec_calls == []


def test_view_with_a_port_out_of_range_is_a_usage_error_not_a_traceback(tmp_path):
    result = run_cli("view", "--port", "99999", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "99999 is not in the range 0<=x<=65535" in result.stderr


def test_view_bind_says_what_is_wrong_with_a_port_or_an_address():
    from gym_compose.view.server import bind

    with pytest.raises(UserError, match="--port 99999 is not a TCP port"):
        bind("127.0.0.1", 99999)
    with pytest.raises(UserError, match="cannot listen on 1.2.3.4.5:0"):
        bind("1.2.3.4.5", 0)


def test_up_input_naming_a_directory_says_so_and_what_it_takes(tmp_path):
    rows = tmp_path / "rows"
    rows.mkdir()
    (rows / "part1.jsonl").write_text(EXAMPLE_ROWS.read_text())
    result = run_cli("up", "--resources-server", "example_single_tool_call", "--input", "rows", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "--input rows is a directory; it takes a JSONL file of rows, one JSON object a line" in result.stderr
    assert "e.g. --input rows/part1.jsonl" in result.stderr and "does not exist" not in result.stderr
    missing = run_cli("up", "--resources-server", "example_single_tool_call", "--input", "gone/rows.jsonl",
                      cwd=tmp_path)
    assert "--input gone/rows.jsonl does not exist (nor does its folder gone)" in missing.stderr


@pytest.mark.parametrize("bind_host, host, allowed", [
    ("127.0.0.1", "127.0.0.1:8123", True),
    ("127.0.0.1", "localhost:8123", True),
    ("127.0.0.1", "[::1]:8123", True),
    ("127.0.0.1", "evil.example:8123", False),  # DNS rebinding: a name that now points at 127.0.0.1
    ("127.0.0.1", "127.0.0.1.evil.example", False),
    ("127.0.0.1", "", False),
    ("::1", "[::1]:8123", True),
    ("10.1.2.3", "10.1.2.3:80", True),
    ("10.1.2.3", "localhost", False),
    ("0.0.0.0", "192.168.1.20:8123", True),  # shared on every interface: by any address of it
    ("0.0.0.0", "evil.example", False),
])
def test_the_view_server_answers_only_its_own_names(bind_host, host, allowed):
    from gym_compose.view.host_check import AllowedHosts

    assert AllowedHosts(bind_host).allows(host) is allowed


def test_the_served_app_refuses_another_host_and_says_nosniff(tmp_path):
    from gym_compose.view.host_check import AllowedHosts, HostCheck
    from gym_compose.view.server import create_app
    from gym_compose.view.service import ViewService
    from tests.support.view import write_synthetic_run

    run = write_synthetic_run(tmp_path / "calc-20260101-000000", tasks=2, repeats=1)
    app = HostCheck(create_app(ViewService([run])), AllowedHosts("127.0.0.1"))
    with TestClient(app, base_url="http://127.0.0.1:8123") as client:
        page = client.get("/api/runs")
        assert page.status_code == 200 and page.headers["x-content-type-options"] == "nosniff"
        refused = client.get("/api/runs", headers={"host": "evil.example:8123"})
        assert refused.status_code == 421 and "evil.example" in refused.text
        assert refused.headers["x-content-type-options"] == "nosniff"
        assert client.get("/", headers={"host": "localhost:8123"}).status_code == 200


def test_the_view_command_serves_through_the_host_check(monkeypatch, tmp_path):
    import uvicorn

    from gym_compose.view import server
    from gym_compose.view.host_check import HostCheck
    from tests.support.view import write_synthetic_run

    served: list[object] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: served.append(self.config.app))
    run = write_synthetic_run(tmp_path / "calc-20260101-000000", tasks=1, repeats=1)
    server.serve([Path(run)], host="127.0.0.1", port=0)
    assert isinstance(served[0], HostCheck)
