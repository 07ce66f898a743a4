"""A NeMo Gym server's pins that clash with the shared runtime's versions: the wheelhouse keeps the
server's versions, and the server image installs them into a site directory that shadows the
runtime's, with everything else still constrained to the runtime (docs/nemo-gym-runtime.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gym_compose.engine import docker_cli
from gym_compose.engine.images import nemo_gym_images, wheelhouse
from gym_compose.errors import UserError
from gym_compose.plan.requirements import shadowing_pins
from tests.support.image_engine import FakeEngine

CLASH = ("ERROR: Cannot install datasets==4.0.0 because these package versions have conflicting dependencies.\n\n"
         "The conflict is caused by:\n    The user requested datasets==4.0.0\n"
         "    The user requested (constraint) datasets==3.6.0\n\nTo fix this you could try to:\n")
DEPENDENCY_CLASH = ("ERROR: Cannot install datasets==4.0.0 because these package versions have conflicting "
                    "dependencies.\n\nThe conflict is caused by:\n"
                    "    datasets 4.0.0 depends on fsspec<=2025.3.0 and >=2023.1.0\n"
                    "    The user requested (constraint) fsspec==2025.9.0\n\nTo fix this you could try to:\n")
RUNTIME_PINS = "datasets==3.6.0\nfsspec==2025.9.0\nPillow==11.3.0\nnumpy==2.3.1\n"


def test_shadowing_pins_are_the_server_packages_the_runtime_holds_at_another_version():
    own = "datasets==4.0.0\nfsspec==2025.3.0\nnumpy==2.3.1\nmolbloom==2.3.4\npillow==12.3.0\n"
    assert shadowing_pins(own, RUNTIME_PINS) == {
        "datasets": ("datasets==4.0.0", "3.6.0"),
        "fsspec": ("fsspec==2025.3.0", "2025.9.0"),
        "pillow": ("pillow==12.3.0", "11.3.0"),  # names compare as PEP 503 does: Pillow == pillow
    }
    assert shadowing_pins("numpy==2.3.1\nmolbloom==2.3.4\n", RUNTIME_PINS) == {}


def _scripted_pip(monkeypatch, answers):
    """pip download answers from a list: (returncode, stderr); records each constraints file."""
    constraints_seen: list[str] = []

    def pip(command):
        constraints = Path(command[command.index("-c") + 1])
        constraints_seen.append(constraints.read_text())
        returncode, stderr = answers.pop(0)
        return subprocess.CompletedProcess(command, returncode, "", stderr)

    monkeypatch.setattr(wheelhouse, "_run_pip", pip)
    return constraints_seen


def test_released_constraints_are_dropped_one_conflict_at_a_time_and_reported(monkeypatch, tmp_path):
    seen = _scripted_pip(monkeypatch, [(1, CLASH), (1, DEPENDENCY_CLASH), (0, "")])
    lines: list[str] = []
    folder = wheelhouse.ensure_wheelhouse("datasets==4.0.0\n", tmp_path, lines.append, constraints=RUNTIME_PINS,
                                          release_clashes=True)
    assert (folder / ".complete").exists()
    assert seen == [RUNTIME_PINS, "fsspec==2025.9.0\nPillow==11.3.0\nnumpy==2.3.1\n", "Pillow==11.3.0\nnumpy==2.3.1\n"]
    assert any("runtime's pins of datasets, fsspec clash" in line for line in lines)


INDIRECT_CLASH = ("The conflict is caused by:\n    google-generativeai 0.7.2 depends on protobuf\n"
                  "    google-ai-generativelanguage 0.6.6 depends on protobuf<5.0.0dev and >=3.19.5\n"
                  "    google-api-core 2.44.0 depends on protobuf<8.0.0 and >=6.33.5\n"
                  "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/...\n")


def test_a_clash_through_packages_the_server_does_not_pin_is_resolved_with_nemo_gym_unpinned(
        monkeypatch, tmp_path):
    runtime = tmp_path / "runtime-wheels"
    runtime.mkdir()
    (runtime / "numpy-2.3.1-py3-none-any.whl").write_bytes(b"")
    requested: list[str] = []

    def pip(command):
        requested.append(Path(command[command.index("-r") + 1]).read_text())
        constraints = Path(command[command.index("-c") + 1]).read_text()
        if constraints:
            return subprocess.CompletedProcess(command, 1, "", INDIRECT_CLASH)
        dest = Path(command[command.index("--dest") + 1])
        for wheel in ("numpy-2.3.1", "protobuf-5.29.6", "evalplus-0.3.1"):
            (dest / f"{wheel}-py3-none-any.whl").write_bytes(b"")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(wheelhouse, "_run_pip", pip)
    lines: list[str] = []
    folder = wheelhouse.ensure_wheelhouse("evalplus==0.3.1\n", tmp_path / "cache", lines.append,
                                          constraints=RUNTIME_PINS, find_links=(runtime,), release_clashes=True,
                                          resolve_with="nemo-gym==0.7.0\n")
    assert requested == ["evalplus==0.3.1\n", "evalplus==0.3.1\nnemo-gym==0.7.0\n"]
    # the runtime's own wheels are left out: the image has them installed
    assert sorted(wheel.name for wheel in folder.glob("*.whl")) == ["evalplus-0.3.1-py3-none-any.whl",
                                                                      "protobuf-5.29.6-py3-none-any.whl"]
    assert any("resolved together with the runtime's own requirements" in line for line in lines)


def test_a_server_whose_requirements_conflict_among_themselves_still_fails(monkeypatch, tmp_path):
    _scripted_pip(monkeypatch, [(1, INDIRECT_CLASH), (1, INDIRECT_CLASH)])
    with pytest.raises(UserError, match="google-api-core 2.44.0 depends on protobuf"):
        wheelhouse.ensure_wheelhouse("evalplus==0.3.1\n", tmp_path, lambda line: None, constraints=RUNTIME_PINS,
                                     release_clashes=True)


def test_without_release_a_clash_stays_an_error(monkeypatch, tmp_path):
    _scripted_pip(monkeypatch, [(1, CLASH)])
    with pytest.raises(UserError, match="could not download wheels"):
        wheelhouse.ensure_wheelhouse("datasets==4.0.0\n", tmp_path, lambda line: None, constraints=RUNTIME_PINS)


def test_a_released_wheelhouse_is_cached_apart_from_a_strict_one(monkeypatch, tmp_path):
    _scripted_pip(monkeypatch, [(0, ""), (0, "")])
    strict = wheelhouse.ensure_wheelhouse("x\n", tmp_path, lambda line: None, constraints=RUNTIME_PINS)
    released = wheelhouse.ensure_wheelhouse("x\n", tmp_path, lambda line: None, constraints=RUNTIME_PINS,
                                            release_clashes=True)
    assert strict != released


@pytest.fixture
def engine(monkeypatch, tmp_path):
    fake = FakeEngine()
    monkeypatch.setattr(docker_cli, "run_docker", fake)
    monkeypatch.setenv("GYM_COMPOSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GYM_COMPOSE_IMAGE_PREFIX", raising=False)
    fake.add("gym-compose/nemo-gym-runtime:r1", {"io.gym-compose.image.parent": "gym-compose/debian-python313:p"})
    return fake


def _wheelhouses(monkeypatch, tmp_path, own_wheels):
    requests: list[dict] = []

    def fake_wheelhouse(requirements, cache_dir, progress, constraints="", find_links=(), platform=None,
                        release_clashes=False, resolve_with=""):
        requests.append({"requirements": requirements, "constraints": constraints,
                         "release_clashes": release_clashes, "resolve_with": resolve_with})
        folder = tmp_path / f"wheels-{len(requests)}"
        folder.mkdir()
        for wheel in (["datasets-3.6.0", "fsspec-2025.9.0", "numpy-2.3.1"] if len(requests) == 1 else own_wheels):
            (folder / f"{wheel}-py3-none-any.whl").write_bytes(b"")
        return folder

    monkeypatch.setattr(nemo_gym_images, "ensure_wheelhouse", fake_wheelhouse)
    return requests


def _server(tmp_path, requirements):
    folder = tmp_path / "gym" / "resources_servers" / "judge"
    folder.mkdir(parents=True)
    (folder / "app.py").write_text("APP = 1\n")
    (folder / "requirements.txt").write_text(requirements)
    return folder


def _shadow_files(engine) -> list[str]:
    """shadow.txt of each committed server container, as it was copied into it."""
    found = []
    for commit in engine.commits:
        staged = [name for name in commit["files"] if name.endswith("/gym-compose-build/shadow.txt")]
        found += [engine.copied[name] for name in staged]
    return found


def test_clashing_pins_go_to_the_shadow_layer_and_the_build_says_which(engine, monkeypatch, tmp_path):
    requests = _wheelhouses(monkeypatch, tmp_path, ["datasets-4.0.0", "fsspec-2025.3.0", "numpy-2.3.1"])
    folder = _server(tmp_path, "-e nemo-gym[dev] @ ../../\ndatasets==4.0.0\n")
    lines: list[str] = []
    nemo_gym_images.ensure_nemo_gym_server_image(folder, "resources_servers", (), "gym-compose/nemo-gym-runtime:r1",
                                                 progress=lines.append)

    own = requests[-1]
    assert own["requirements"] == "datasets==4.0.0\n" and own["release_clashes"]
    assert own["resolve_with"] == nemo_gym_images.RUNTIME_REQUIREMENTS.read_text()
    assert "datasets==3.6.0" in own["constraints"]
    assert _shadow_files(engine) == ["datasets==4.0.0\nfsspec==2025.3.0\n"]
    (commit,) = engine.commits
    assert "--target /opt/server-packages" in nemo_gym_images.SERVER_SCRIPT.read_text()
    assert any("PYTHONPATH=/srv/gym:/opt/server-packages" in change for change in commit["changes"])
    said = ("(NeMo Gym runtime); its own datasets==4.0.0 (runtime 3.6.0), fsspec==2025.3.0 (runtime 2025.9.0) "
            "shadow the runtime's")
    assert any(said in line for line in lines), lines


def test_a_server_without_clashes_has_an_empty_shadow_file(engine, monkeypatch, tmp_path):
    _wheelhouses(monkeypatch, tmp_path, ["numpy-2.3.1", "molbloom-2.3.4"])
    lines: list[str] = []
    nemo_gym_images.ensure_nemo_gym_server_image(_server(tmp_path, "molbloom==2.3.4\n"), "resources_servers", (),
                                                 "gym-compose/nemo-gym-runtime:r1", progress=lines.append)
    assert _shadow_files(engine) == [""]
    assert not any("shadow" in line for line in lines)
