"""Host side of server images that compile packages from source (docker/server-native.Dockerfile).

An implementation folder opts in with `native-requirements.txt`: pip requirement lines of
packages PyPI has no wheel of for the image's platform (llama-cpp-python). The host downloads their
sdists once into the cache and reads from each, without building it, what the image build needs:
the build backend (`[build-system] requires` of pyproject.toml), installed in the build stage from
a wheelhouse, and the package's own dependencies (`Requires-Dist` of PKG-INFO), installed with the
server's requirements. Optional files beside it: `native-build.env` (KEY=VALUE lines exported for
the build, e.g. CMAKE_ARGS), `native-prepare.sh` (run in each unpacked source tree before it is
built), `image_setup.py` (run after the install, see the Dockerfile).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gym_compose.engine import docker_cli
from gym_compose.engine.images.build_lock import COMPLETE_MARKER, make_once, publish_complete
from gym_compose.engine.images.image_hash import ContentHash
from gym_compose.engine.images.image_settings import ImageSettings, PythonPlatform
from gym_compose.errors import UserError

NATIVE_ENV = "native-build.env"
NATIVE_PREPARE = "native-prepare.sh"
IMAGE_SETUP = "image_setup.py"
PIP_TIMEOUT_S = 900
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True)
class NativeSources:
    """The downloaded sdists and what was read from them."""

    sdists: list[Path]
    build_requires: list[str]
    runtime_requires: list[str]


def native_env(implementation_dir: Path) -> str:
    """native-build.env, checked: KEY=VALUE lines (comments and blank lines allowed)."""
    path = implementation_dir / NATIVE_ENV
    if not path.is_file():
        return ""
    text = path.read_text()
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", stripped):
            raise UserError(f"{path}, line {number}: expected KEY=VALUE, got {stripped!r}",
                            hint="one variable per line, e.g. CMAKE_ARGS=\"-DGGML_NATIVE=OFF\"")
    return text


def ensure_native_sources(requirements: str, cache_dir: Path, progress: Callable[[str], None]) -> NativeSources:
    """The sdists of `requirements` (downloaded into the cache once) and their build/runtime needs."""
    key = ContentHash().add_text("native-requirements", requirements).hexdigest()
    folder = cache_dir / "sdists" / key
    make_once(folder, cache_dir / "locks" / f"sdists-{key}.lock",
              lambda: _download_sdists(requirements, folder, progress))
    sdists = sorted(path for path in folder.iterdir() if path.name.endswith((".tar.gz", ".tgz")))
    build_requires: list[str] = []
    runtime_requires: list[str] = []
    for sdist in sdists:
        build, runtime = read_sdist_requirements(sdist)
        build_requires += [line for line in build if line not in build_requires]
        runtime_requires += [line for line in runtime if line not in runtime_requires]
    return NativeSources(sdists, build_requires, runtime_requires)


def _member_bytes(archive: tarfile.TarFile, member: tarfile.TarInfo | None) -> bytes:
    """A regular file's bytes; nothing for a missing member (or one that is not a file)."""
    handle = archive.extractfile(member) if member is not None else None
    return handle.read() if handle is not None else b""


def read_sdist_requirements(sdist: Path) -> tuple[list[str], list[str]]:
    """(build-system requires, unconditional Requires-Dist) of an sdist, read without building it."""
    try:
        with tarfile.open(sdist) as archive:
            members = {member.name.split("/", 1)[-1]: member for member in archive.getmembers()
                       if member.name.count("/") == 1}
            pyproject = _member_bytes(archive, members.get("pyproject.toml"))
            pkg_info = _member_bytes(archive, members.get("PKG-INFO"))
    except (tarfile.TarError, OSError, KeyError) as error:
        raise UserError(f"cannot read the source distribution {sdist}: {error}",
                        hint="delete it from the cache (it may be truncated) and build again") from None
    build = ["setuptools>=40.8.0", "wheel"]
    if pyproject:
        build = list(tomllib.loads(pyproject.decode()).get("build-system", {}).get("requires", build))
    import email.parser  # here: only a native build reads an sdist (docs/performance.md)

    metadata = email.parser.Parser().parsestr(pkg_info.decode("utf-8", "replace"))
    runtime = [line for line in metadata.get_all("Requires-Dist") or [] if "extra ==" not in line.replace("'", '"')]
    return build, runtime


def _download_sdists(requirements: str, folder: Path, progress: Callable[[str], None]) -> None:
    names = [match.group(1) for line in requirements.splitlines() if (match := _NAME.match(line))]
    progress(f"native build: downloading the sources of {', '.join(names)}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        (staging / "requirements.txt").write_text(requirements)
        command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--quiet", "--no-deps",
                   "--dest", str(staging), "-r", str(staging / "requirements.txt")]
        for name in names:
            command += ["--no-binary", name]
        try:
            completed = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise UserError(f"pip did not download {', '.join(names)} within {PIP_TIMEOUT_S} s",
                            hint="check that PyPI (or PIP_INDEX_URL) is reachable from this host") from None
        if completed.returncode != 0:
            tail = "\n".join("    " + line for line in completed.stderr.strip().splitlines()[-15:])
            raise UserError(f"pip could not download the sources of {', '.join(names)}:\n{tail}",
                            hint="check the lines of native-requirements.txt and that PyPI is reachable")
        (staging / "requirements.txt").unlink()
        publish_complete(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# Runs as root in the build container; the wheel is handed back to the host's user.
_WHEEL_BUILD_SCRIPT = (
    "set -e; python3 -m venv /tmp/venv; "
    "/tmp/venv/bin/pip install --quiet --disable-pip-version-check --no-index --find-links /build/build-wheels "
    "-r /build/build-requirements.txt; "
    "/tmp/venv/bin/pip wheel --quiet --disable-pip-version-check --no-index --no-build-isolation --no-deps "
    "--wheel-dir /build/out /build/src/*; chown -R {owner} /build/out"
)
WHEEL_BUILD_TIMEOUT_S = 900


def build_sdist_wheel(requirement: str, platform: PythonPlatform, cache_dir: Path,
                      progress: Callable[[str], None]) -> Path:
    """The wheel of `requirement` (an sdist with a C extension) for the offline images' Python,
    compiled in the Debian build image of their release (gcc, python3-dev), with no network inside.
    Cached under the cache dir, so each one is compiled once per machine."""
    from gym_compose.engine.images.debian_base import ensure_debian_wheel_build_image
    from gym_compose.engine.images.wheelhouse import ensure_wheelhouse  # imports this module

    settings = ImageSettings.from_env()
    builder = ensure_debian_wheel_build_image(settings, progress, platform.suite)
    key = ContentHash().add_text("requirement", requirement).add_text("builder", builder).hexdigest()
    folder = cache_dir / "built-wheels" / key
    make_once(folder, cache_dir / "locks" / f"built-wheels-{key}.lock",
              lambda: _compile_wheel(requirement, platform, builder, folder, cache_dir, progress, ensure_wheelhouse))
    wheels = sorted(folder.glob("*.whl"))
    if len(wheels) != 1:
        raise UserError(f"building {requirement!r} from source left {len(wheels)} wheels in {folder}",
                        hint="delete that folder and build again")
    return wheels[0]


def _compile_wheel(requirement: str, platform: PythonPlatform, builder: str, folder: Path, cache_dir: Path,
                   progress: Callable[[str], None], ensure_wheelhouse: Callable[..., Path]) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        source = staging / "src"
        _download_sdists(requirement + "\n", source, progress)
        (sdist,) = [path for path in source.iterdir() if path.name != COMPLETE_MARKER]
        (source / COMPLETE_MARKER).unlink()
        build_requires, _ = read_sdist_requirements(sdist)
        build_text = "".join(f"{line}\n" for line in build_requires)
        (staging / "build-requirements.txt").write_text(build_text)
        build_wheels = ensure_wheelhouse(build_text, cache_dir, progress, platform=platform)
        shutil.copytree(build_wheels, staging / "build-wheels")
        (staging / "out").mkdir()
        progress(f"native build: compiling {sdist.name} for Python {platform.python} in {builder}")
        started = time.monotonic()
        script = _WHEEL_BUILD_SCRIPT.format(owner=f"{os.getuid()}:{os.getgid()}")
        result = docker_cli.run_docker(
            ["run", "--rm", "--network", "none", "--user", "0:0",
             "--mount", f"type=bind,source={staging},target=/build", builder, "sh", "-c", script],
            timeout=WHEEL_BUILD_TIMEOUT_S, check=False)
        if result.returncode != 0:
            tail = "\n".join("    " + line for line in (result.stdout + result.stderr).strip().splitlines()[-15:])
            raise UserError(f"compiling {sdist.name} for Python {platform.python} failed:\n{tail}",
                            hint="the package may need system libraries the Debian build image lacks; "
                            "pin a version with manylinux wheels, or build with a registry reachable")
        wheels = list((staging / "out").glob("*.whl"))
        progress(f"native build: {', '.join(wheel.name for wheel in wheels)} in {time.monotonic() - started:.1f} s")
        keep = staging / "wheel"
        keep.mkdir()
        for wheel in wheels:
            shutil.move(str(wheel), keep / wheel.name)
        publish_complete(keep, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
