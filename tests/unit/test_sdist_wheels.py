"""A C extension PyPI has only as an sdist (reasoning-gym's pycosat==0.6.6) is compiled for the
offline images' Python in a Debian build container and cached; the docker CLI is faked."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

from gym_compose.engine import docker_cli
from gym_compose.engine.docker_cli import DockerResult
from gym_compose.engine.images import debian_base, native_build, wheelhouse
from gym_compose.engine.images.image_settings import LEAN_PLATFORM, NEMO_GYM_PLATFORM, ImageSettings, machine_arch

CONFLICT = ("ERROR: Cannot install reasoning-gym==0.1.25 because these package versions have conflicting "
            "dependencies.\n\nThe conflict is caused by:\n    reasoning-gym 0.1.25 depends on pycosat==0.6.6\n")


def test_a_c_extension_without_wheels_is_compiled_and_pip_may_then_take_its_linux_wheel(monkeypatch, tmp_path):
    commands: list[list[str]] = []

    def pip(command):
        commands.append(list(command))
        if "wheel" in command:  # the host's own build: a platform wheel, which does not fit the image
            wheel_dir = Path(command[command.index("--wheel-dir") + 1])
            (wheel_dir / "pycosat-0.6.6-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
            return subprocess.CompletedProcess(command, 0, "", "")
        downloads = [c for c in commands if "download" in c]
        return subprocess.CompletedProcess(command, 1 if len(downloads) == 1 else 0, "", CONFLICT)

    compiled = tmp_path / "pycosat-0.6.6-cp311-cp311-linux_x86_64.whl"
    compiled.write_bytes(b"compiled")
    asked: list[tuple] = []
    monkeypatch.setattr(wheelhouse, "_run_pip", pip)
    def build_sdist_wheel(requirement, platform, cache_dir, progress):
        asked.append((requirement, platform))
        return compiled

    monkeypatch.setattr(native_build, "build_sdist_wheel", build_sdist_wheel)
    folder = wheelhouse.ensure_wheelhouse("reasoning-gym==0.1.25\n", tmp_path / "cache", lambda line: None)

    assert asked == [("pycosat==0.6.6", LEAN_PLATFORM)]
    assert (folder / compiled.name).read_bytes() == b"compiled"
    first, retried = [c for c in commands if "download" in c]
    assert f"linux_{machine_arch()}" not in first
    assert retried[-2:] == ["--platform", f"linux_{machine_arch()}"]


def _sdist(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in {"pycosat-0.6.6/pyproject.toml": '[build-system]\nrequires = ["setuptools>=61"]\n',
                           "pycosat-0.6.6/PKG-INFO": "Metadata-Version: 2.1\nName: pycosat\nVersion: 0.6.6\n"}.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_the_wheel_is_built_in_the_debian_build_image_offline_and_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("GYM_COMPOSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GYM_COMPOSE_IMAGE_PREFIX", raising=False)
    builders: list[str] = []
    def builder(settings, progress, suite):
        builders.append(suite)
        return f"gym-compose/debian-wheel-build-{suite}:x"

    monkeypatch.setattr(debian_base, "ensure_debian_wheel_build_image", builder)

    def download_sdists(requirements, folder, progress):
        folder.mkdir()
        _sdist(folder / "pycosat-0.6.6.tar.gz")
        (folder / ".complete").write_text("")

    monkeypatch.setattr(native_build, "_download_sdists", download_sdists)
    build_wheels = tmp_path / "build-wheels"
    build_wheels.mkdir()
    (build_wheels / "setuptools-80.0.0-py3-none-any.whl").write_bytes(b"")
    wheelhouse_requests: list[tuple] = []
    monkeypatch.setattr(wheelhouse, "ensure_wheelhouse",
                        lambda text, cache_dir, progress, platform: wheelhouse_requests.append((text, platform))
                        or build_wheels)
    runs: list[list[str]] = []

    def docker(args, *, timeout, check=True, **kwargs):
        runs.append(list(args))
        mount = next(arg for arg in args if arg.startswith("type=bind,"))
        build = Path(mount.split("source=")[1].split(",")[0])
        assert (build / "build-requirements.txt").read_text() == "setuptools>=61\n"
        assert (build / "build-wheels" / "setuptools-80.0.0-py3-none-any.whl").exists()
        assert [path.name for path in (build / "src").iterdir()] == ["pycosat-0.6.6.tar.gz"]
        (build / "out" / "pycosat-0.6.6-cp313-cp313-linux_x86_64.whl").write_bytes(b"compiled")
        return DockerResult(tuple(args), 0, "", "")

    monkeypatch.setattr(docker_cli, "run_docker", docker)
    cache = tmp_path / "cache"
    wheel = native_build.build_sdist_wheel("pycosat==0.6.6", NEMO_GYM_PLATFORM, cache, lambda line: None)
    again = native_build.build_sdist_wheel("pycosat==0.6.6", NEMO_GYM_PLATFORM, cache, lambda line: None)

    assert wheel == again and wheel.read_bytes() == b"compiled" and wheel.is_relative_to(cache)
    (run,) = runs  # the second call is answered from the cache
    assert run[:5] == ["run", "--rm", "--network", "none", "--user"]
    assert "gym-compose/debian-wheel-build-trixie:x" in run
    assert builders == ["trixie", "trixie"]
    assert wheelhouse_requests == [("setuptools>=61\n", NEMO_GYM_PLATFORM)]


def test_the_wheel_build_image_has_a_compiler_and_the_headers_of_the_images_debian(monkeypatch, tmp_path):
    made: list[tuple] = []
    imported: list[str] = []

    def rootfs(settings, path, progress, packages, suite):
        made.append((packages, suite))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")

    def docker(args, *, timeout, check=True, retries=0, **kwargs):
        if args[:2] == ["image", "inspect"]:
            return DockerResult(tuple(args), 1, "[]", "No such image")
        imported.append(args[-1])
        return DockerResult(tuple(args), 0, json.dumps([]), "")

    monkeypatch.setattr(debian_base, "_make_rootfs", rootfs)
    monkeypatch.setattr(docker_cli, "run_docker", docker)
    monkeypatch.setenv("GYM_COMPOSE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GYM_COMPOSE_IMAGE_PREFIX", raising=False)
    settings = ImageSettings.from_env()
    lean = debian_base.ensure_debian_wheel_build_image(settings, lambda line: None)
    trixie = debian_base.ensure_debian_wheel_build_image(settings, lambda line: None, "trixie")
    assert lean.startswith("gym-compose/debian-wheel-build:")
    assert trixie.startswith("gym-compose/debian-wheel-build-trixie:")
    assert imported == [lean, trixie]
    assert [suite for _, suite in made] == ["bookworm", "trixie"]
    assert {"gcc", "python3-dev", "python3-venv"} <= set(made[0][0])


def test_the_nemo_gym_parent_has_the_x11_libraries_rdkit_loads():
    assert {"libxrender1", "libxext6", "libx11-6"} <= set(debian_base.NEMO_GYM_PACKAGES)
