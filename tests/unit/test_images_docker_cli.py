"""The docker CLI helper against a stand-in `docker` script: timeouts, retries, error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_compose.engine import docker_cli
from gym_compose.engine.images import wheelhouse
from gym_compose.engine.images.image_build import BuildProgress
from gym_compose.engine.images.image_hash import ContentHash, tree_files


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    """Points the helper at a shell script; `write(body)` sets what it does. Calls are counted."""
    script = tmp_path / "docker"
    counter = tmp_path / "calls"
    monkeypatch.setattr(docker_cli, "DOCKER", str(script))
    monkeypatch.setattr(docker_cli, "RETRY_DELAYS_S", (0.01,))

    def write(body: str) -> Path:
        script.write_text(f"#!/bin/sh\necho x >> {counter}\n{body}\n")
        script.chmod(0o755)
        return counter

    return write


def calls(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def test_success_returns_stdout(fake_docker):
    fake_docker('echo "hello $1"')
    result = docker_cli.run_docker(["ps"], timeout=10)
    assert result.ok and result.stdout.strip() == "hello ps"


def test_transient_failure_is_retried_until_it_works(fake_docker, tmp_path):
    flag = tmp_path / "flag"
    counter = fake_docker(f'if [ -e {flag} ]; then echo ok; exit 0; fi; touch {flag}; echo "net/http: TLS handshake timeout" >&2; exit 1')
    result = docker_cli.run_docker(["pull", "x"], timeout=10, retries=2)
    assert result.ok and calls(counter) == 2


def test_permanent_failure_is_not_retried_and_names_the_command(fake_docker):
    counter = fake_docker('echo "Error: No such image: nope" >&2; exit 1')
    with pytest.raises(docker_cli.DockerCommandError, match=r"(?s)`docker image inspect nope` failed.*No such image"):
        docker_cli.run_docker(["image", "inspect", "nope"], timeout=10, retries=3)
    assert calls(counter) == 1


def test_check_false_hands_back_the_failure(fake_docker):
    fake_docker('echo "boom" >&2; exit 3')
    result = docker_cli.run_docker(["x"], timeout=10, check=False)
    assert result.returncode == 3 and "boom" in result.stderr


def test_timeout_becomes_a_user_error(fake_docker):
    counter = fake_docker("sleep 5")
    with pytest.raises(docker_cli.DockerTimeout, match="did not finish within 0 s"):
        docker_cli.run_docker(["info"], timeout=0.3, retries=1)
    assert calls(counter) == 2


def test_streaming_passes_each_line_and_times_out(fake_docker):
    fake_docker('echo one; echo two >&2; exit 0')
    seen: list[str] = []
    result = docker_cli.run_docker(["build", "."], timeout=10, on_line=seen.append)
    assert result.ok and seen == ["one", "two"]

    fake_docker("echo start; sleep 5")
    with pytest.raises(docker_cli.DockerTimeout):
        docker_cli.run_docker(["build", "."], timeout=0.5, on_line=seen.append)


def test_daemon_down_and_missing_cli_are_explained(fake_docker, monkeypatch):
    fake_docker('echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2; exit 1')
    with pytest.raises(docker_cli.DockerUnavailable, match="not running") as error:
        docker_cli.run_docker(["info"], timeout=10, check=False)
    assert "systemctl start docker" in str(error.value) and error.value.exit_code == 3

    monkeypatch.setattr(docker_cli, "DOCKER", "/nonexistent/docker")
    with pytest.raises(docker_cli.DockerUnavailable, match="was not found"):
        docker_cli.run_docker(["info"], timeout=10)


def test_build_progress_shows_one_line_per_working_step_with_its_duration():
    shown: list[str] = []
    # each step's start and end: ARG 0.1 s, FROM 0.5 s, RUN 1.5 s, LABEL 2 s (a busy engine)
    now = iter([0.0, 0.1, 10.0, 10.5, 10.5, 12.0, 12.0, 14.0])
    display = BuildProgress("gym-compose/base:1", shown.append, clock=lambda: next(now))
    for line in ["Step 1/4 : ARG X", "Step 2/4 : FROM a", " ---> Using cache", "Step 3/4 : RUN pip install x", "Collecting x", "Step 4/4 : LABEL a=b"]:
        display(line)
    display.finish()
    assert shown == ["  [gym-compose/base:1] 2/4 FROM a (0.5 s)", "  [gym-compose/base:1] 3/4 RUN pip install x (1.5 s)",
                     "  [gym-compose/base:1] 4/4 LABEL a=b (2.0 s)"]
    assert list(display.recent)[-2:] == ["Collecting x", "Step 4/4 : LABEL a=b"]
    display("\x1b[91mERROR: No matching distribution\x1b[0m")
    assert display.recent[-1] == "ERROR: No matching distribution"


def test_tree_files_and_content_hash(tmp_path):
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("a")
    (tmp_path / "pkg" / "__pycache__" / "a.pyc").write_text("c")
    (tmp_path / "skipme").mkdir()
    (tmp_path / "skipme" / "b.py").write_text("b")
    (tmp_path / "top.py").write_text("t")
    files = tree_files(tmp_path, skip=["skipme"])
    assert files == [Path("pkg/a.py"), Path("top.py")]

    first = ContentHash().add_tree("x", tmp_path, files).hexdigest()
    assert first == ContentHash().add_tree("x", tmp_path, files).hexdigest()
    (tmp_path / "pkg" / "a.py").write_text("changed")
    assert ContentHash().add_tree("x", tmp_path, files).hexdigest() != first
    # a name moved between inputs must not collide
    assert ContentHash().add_text("a", "bc").hexdigest() != ContentHash().add_text("ab", "c").hexdigest()


def test_wheelhouse_targets_bookworm_and_python_311():
    tags = wheelhouse.platform_tags("x86_64")
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux_2_17_x86_64" in tags
    assert tags[-1] == "manylinux2014_x86_64"
    options = wheelhouse.target_options()
    assert options[options.index("--python-version") + 1] == "3.11"
    assert "--only-binary=:all:" in options


def test_wheelhouse_is_reused_from_the_cache_without_pip(tmp_path, monkeypatch):
    def no_pip(*args, **kwargs):
        raise AssertionError("pip must not run for a cached wheelhouse")

    first_run: list[str] = []

    def fake_download(requirements, constraints, target, platform=None, find_links=(), release_clashes=False, **_):
        first_run.append(requirements)
        (target / "orjson-3.10.0-cp311-cp311-manylinux_2_17_x86_64.whl").write_bytes(b"w")
        return set()  # no constraint released

    monkeypatch.setattr(wheelhouse, "_download", fake_download)
    folder = wheelhouse.ensure_wheelhouse("orjson\n", tmp_path, progress=lambda line: None)
    monkeypatch.setattr(wheelhouse, "_download", no_pip)
    assert wheelhouse.ensure_wheelhouse("orjson\n", tmp_path, progress=lambda line: None) == folder
    assert first_run == ["orjson\n"]
    assert wheelhouse.pinned_versions(folder) == "orjson==3.10.0\n"


def test_a_compiled_package_is_not_taken_from_the_hosts_build(tmp_path, monkeypatch):
    class Completed:
        returncode = 0
        stderr = ""

    def fake_pip(command):
        (Path(command[command.index("--wheel-dir") + 1]) / "native-1.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
        return Completed()

    monkeypatch.setattr(wheelhouse, "_run_pip", fake_pip)
    assert wheelhouse._build_pure_python_wheel("native==1.0", tmp_path) is False
    assert list(tmp_path.iterdir()) == []  # compiled for the image's Python instead: test_sdist_wheels.py


def test_compose_failures_name_the_subcommand_not_the_project_flags(fake_docker):
    fake_docker('echo "port is already allocated" >&2; exit 1')
    with pytest.raises(docker_cli.DockerCommandError, match=r"`docker compose up` failed"):
        docker_cli.run_docker(["compose", "-p", "proj", "-f", "/x/compose.yaml", "up", "--detach"], timeout=10)
