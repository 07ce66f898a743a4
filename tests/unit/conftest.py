"""Fixtures the unit tests share. A module that needs another fixture of the same name (a fake
docker CLI instead of the fake engine) defines its own, which wins there."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_compose.engine import docker_cli
from gym_compose.engine.images import debian_base, saved_images
from gym_compose.engine.images import lean_images as images
from tests.support.image_engine import FakeEngine
from tests.support.plans import weather_roots


@pytest.fixture
def roots(tmp_path: Path) -> list[Path]:
    return weather_roots(tmp_path)


@pytest.fixture
def engine(monkeypatch, tmp_path):
    fake = FakeEngine()
    monkeypatch.setattr(docker_cli, "run_docker", fake)
    monkeypatch.setenv("GYM_COMPOSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GYM_COMPOSE_OFFLINE", raising=False)
    monkeypatch.delenv("GYM_COMPOSE_BASE_IMAGE", raising=False)
    monkeypatch.delenv("GYM_COMPOSE_IMAGE_PREFIX", raising=False)

    def fake_rootfs(settings, rootfs, progress, packages=debian_base.PACKAGES, suite="bookworm"):
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        rootfs.write_bytes(b"rootfs")

    def fake_wheelhouse(requirements, cache_dir, progress, constraints="", find_links=()):
        folder = cache_dir / "fake-wheels"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "fastapi-0.110.0-py3-none-any.whl").write_bytes(b"wheel")
        fake.wheelhouse_requests = getattr(fake, "wheelhouse_requests", []) + [(requirements, constraints)]
        return folder

    monkeypatch.setattr(debian_base, "_make_rootfs", fake_rootfs)
    monkeypatch.setattr(images, "ensure_wheelhouse", fake_wheelhouse)
    yield fake
    saved_images.wait_for_saves()


@pytest.fixture
def runtime_requirements(monkeypatch, tmp_path):
    path = tmp_path / "runtime-requirements.txt"
    path.write_text("fastapi\n")
    monkeypatch.setattr(images, "RUNTIME_REQUIREMENTS", path)
    return path
