"""Images: the base (Python + gym_compose runtime) and one per server implementation.

Tags carry a hash of everything that goes into the image, so an unchanged image is never
rebuilt. The base's parent is a public Python image; when it cannot be pulled (no registry),
or GYM_COMPOSE_OFFLINE=1, an offline Debian image and a host-side wheelhouse are used instead.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from gym_compose.engine import docker_cli
from gym_compose.engine.build_lock import file_lock
from gym_compose.engine.debian_base import debian_python_tag, ensure_debian_build_image, ensure_debian_python_image
from gym_compose.engine.image_build import build_image, inspect_image
from gym_compose.engine.image_hash import ContentHash, tree_files
from gym_compose.engine.image_settings import IMAGE_LABEL, PYTHON_VERSION, ImageSettings
from gym_compose.engine.native_build import (
    IMAGE_SETUP,
    NATIVE_PREPARE,
    NativeSources,
    ensure_native_sources,
    native_env,
    native_requirements,
)
from gym_compose.engine.server_requirements import server_requirements
from gym_compose.engine.wheelhouse import ensure_wheelhouse, pinned_versions
from gym_compose.errors import UserError
from gym_compose.paths import PROJECT_ROOT

Progress = Callable[[str], None]

PACKAGE_DIR = PROJECT_ROOT / "gym_compose"
DOCKER_DIR = PROJECT_ROOT / "docker"
RUNTIME_REQUIREMENTS = DOCKER_DIR / "runtime-requirements.txt"
# The part of the package that runs in containers (docs/architecture.md): the rest is host-only,
# and leaving it out keeps edits to it from rebuilding the base.
CONTAINER_MODULES = frozenset({"__init__.py", "errors.py", "contract.py", "server", "collect", "sandbox"})
# Never copied into a server image: tests and caches (data/ and configs/ are).
SERVER_SKIPPED = ("tests",)
PULL_TIMEOUT_S = 900
OFFLINE_PIP_OPTIONS = "--no-index"


@dataclass(frozen=True)
class Parent:
    """The image the base is built FROM, and how it was obtained."""

    image: str
    image_id: str
    offline: bool
    reason: str


@dataclass(frozen=True)
class BaseInputs:
    """Everything from this checkout that goes into the base image."""

    dockerfile: str
    requirements: str
    sources: list[Path]

    @classmethod
    def read(cls) -> "BaseInputs":
        return cls(
            dockerfile=(DOCKER_DIR / "base.Dockerfile").read_text(),
            requirements=_read_runtime_requirements(),
            sources=[path for path in tree_files(PACKAGE_DIR) if path.parts[0] in CONTAINER_MODULES],
        )

    def tag(self, prefix: str, parent_id: str, offline: bool) -> str:
        digest = (
            ContentHash()
            .add_text("dockerfile", self.dockerfile)
            .add_text("requirements", self.requirements)
            .add_text("parent", parent_id)
            .add_text("pip-options", OFFLINE_PIP_OPTIONS if offline else "")
            .add_text("python", PYTHON_VERSION)
            .add_tree("gym_compose", PACKAGE_DIR, self.sources)
            .hexdigest()
        )
        return f"{prefix}/base:{digest}"


def ensure_base_image(progress: Progress = print) -> str:
    """Tag of the local base image `gym-compose/base:<hash>`, built when missing."""
    settings = ImageSettings.from_env()
    inputs = BaseInputs.read()
    if not settings.offline and inspect_image(settings.public_base) is None:
        # An up-to-date offline base is used as is: no pull attempt (slow where DNS hangs).
        ready = _ready_offline_base(settings, inputs)
        if ready is not None:
            progress(f"base image {ready} is up to date (offline bootstrap; {settings.public_base} is not local)")
            return ready
    parent = choose_parent(settings, progress)
    tag = inputs.tag(settings.image_prefix, parent.image_id, parent.offline)
    if image_exists(tag):
        progress(f"base image {tag} is up to date ({parent.reason})")
        return tag
    with file_lock(settings.cache_dir / "locks" / f"{image_name(tag)}.lock"), _build_context(settings) as context:
        if image_exists(tag):
            return tag
        progress(f"building base image {tag} ({parent.reason})")
        (context / "wheels").mkdir()
        if parent.offline:
            _link_wheels(ensure_wheelhouse(inputs.requirements, settings.cache_dir, progress), context / "wheels")
        (context / "Dockerfile").write_text(inputs.dockerfile)
        (context / "runtime-requirements.txt").write_text(inputs.requirements)
        _copy_files(PACKAGE_DIR, inputs.sources, context / "gym_compose")
        build_args = {
            "PARENT_IMAGE": parent.image,
            "PYTHON_VERSION": PYTHON_VERSION,
            "PIP_INSTALL_OPTIONS": OFFLINE_PIP_OPTIONS if parent.offline else "",
        }
        build_image(context, tag, build_args=build_args, progress=progress, verbose=settings.verbose)
    return tag


def _ready_offline_base(settings: ImageSettings, inputs: BaseInputs) -> str | None:
    debian = inspect_image(debian_python_tag(settings))
    if debian is None:
        return None
    tag = inputs.tag(settings.image_prefix, debian["Id"], offline=True)
    return tag if image_exists(tag) else None


def ensure_server_image(implementation_dir: Path, base_tag: str, progress: Progress = print) -> str:
    """Tag of `gym-compose/<impl>:<hash>`: the base plus the implementation folder at /srv/server
    and the packages of its requirements.txt (and of native-requirements.txt, compiled in a build
    stage); built when missing."""
    settings = ImageSettings.from_env()
    implementation_dir = Path(implementation_dir)
    if not implementation_dir.is_dir():
        raise UserError(
            f"Server implementation folder {implementation_dir} does not exist.",
            hint="check the implementation name in the config and the search roots (--search-dir)",
        )
    name = image_name(implementation_dir.name)
    files = tree_files(implementation_dir, skip=SERVER_SKIPPED)
    requirements = server_requirements(implementation_dir)
    native = native_requirements(implementation_dir)
    dockerfile = (DOCKER_DIR / "server-native.Dockerfile").read_text() if native else \
        server_dockerfile(has_requirements=bool(requirements))
    offline = _is_offline_base(base_tag, settings)
    digest = (
        ContentHash()
        .add_text("dockerfile", dockerfile)
        .add_text("base", base_tag)
        .add_text("requirements", requirements)
        .add_tree("server", implementation_dir, files)
    )
    builder = None
    if native:  # the folder's native-* files are in the tree already; the build image is not
        builder = _native_builder(settings, offline, progress)
        digest.add_text("builder", builder["Id"])
    tag = f"{settings.image_prefix}/{name}:{digest.hexdigest()}"
    if image_exists(tag):
        progress(f"server image {tag} is up to date")
        return tag
    with file_lock(settings.cache_dir / "locks" / f"{image_name(tag)}.lock"), _build_context(settings) as context:
        if image_exists(tag):
            return tag
        progress(f"building server image {tag}")
        (context / "wheels").mkdir()
        build_args = {"BASE_IMAGE": base_tag, "PIP_INSTALL_OPTIONS": OFFLINE_PIP_OPTIONS if offline else ""}
        own_needs = requirements
        if native:
            sources = ensure_native_sources(native, settings.cache_dir, progress)
            _native_context(implementation_dir, sources, settings, context / "native", progress)
            assert builder is not None  # looked up above for a native build
            build_args["BUILDER_IMAGE"] = builder["RepoTags"][0] if builder.get("RepoTags") else builder["Id"]
            own_needs = requirements + "".join(f"{line}\n" for line in sources.runtime_requires)
            setup = context / "image_setup"
            setup.mkdir()
            if (implementation_dir / IMAGE_SETUP).is_file():
                shutil.copy2(implementation_dir / IMAGE_SETUP, setup / IMAGE_SETUP)
        if own_needs.strip() and offline:
            runtime = ensure_wheelhouse(_read_runtime_requirements(), settings.cache_dir, progress)
            own = ensure_wheelhouse(own_needs, settings.cache_dir, progress, constraints=pinned_versions(runtime),
                                    find_links=(runtime,))
            _link_wheels(own, context / "wheels")
        (context / "Dockerfile").write_text(dockerfile)
        (context / "requirements.txt").write_text(requirements)
        _copy_files(implementation_dir, files, context / "server")
        build_image(context, tag, build_args=build_args, progress=progress, verbose=settings.verbose)
    return tag


def _native_builder(settings: ImageSettings, offline: bool, progress: Progress) -> dict:
    """The build stage's image: Debian with g++/cmake/make offline, else the public Python image
    (the build installs them with apt)."""
    builder = ensure_debian_build_image(settings, progress) if offline else settings.public_base
    image = inspect_image(builder)
    if image is None:
        raise UserError(f"The build image {builder} for compiled packages is not available locally.",
                        hint="pull it (`docker pull " + builder + "`) or set GYM_COMPOSE_OFFLINE=1")
    return {**image, "RepoTags": [builder]}


def _native_context(implementation_dir: Path, sources: NativeSources, settings: ImageSettings, target: Path,
                    progress: Progress) -> None:
    (target / "sdists").mkdir(parents=True)
    (target / "build-wheels").mkdir()
    for sdist in sources.sdists:
        _link_file(sdist, target / "sdists" / sdist.name)
    build_requirements = "".join(f"{line}\n" for line in sources.build_requires)
    _link_wheels(ensure_wheelhouse(build_requirements, settings.cache_dir, progress), target / "build-wheels")
    (target / "build-requirements.txt").write_text(build_requirements)
    (target / "native-build.env").write_text(native_env(implementation_dir))
    if (implementation_dir / NATIVE_PREPARE).is_file():
        shutil.copy2(implementation_dir / NATIVE_PREPARE, target / NATIVE_PREPARE)


def choose_parent(settings: ImageSettings, progress: Progress) -> Parent:
    """The public Python image when it is here or can be pulled, else the offline Debian image."""
    if not settings.offline:
        local = inspect_image(settings.public_base)
        if local is not None:
            return Parent(settings.public_base, local["Id"], False, f"from {settings.public_base}")
        pulled = docker_cli.run_docker(
            ["pull", "--quiet", settings.public_base], timeout=PULL_TIMEOUT_S, retries=2, check=False
        )
        if pulled.ok:
            image = inspect_image(settings.public_base)
            if image is not None:
                return Parent(settings.public_base, image["Id"], False, f"pulled {settings.public_base}")
        why = _last_line(pulled.stderr or pulled.stdout) or "pull failed"
        progress(f"base image: cannot pull {settings.public_base} ({why}); taking the offline path")
        reason = "offline bootstrap"
    else:
        reason = "offline bootstrap, GYM_COMPOSE_OFFLINE is set"
    with ThreadPoolExecutor(max_workers=1) as pool:
        # The runtime's wheel download (network) overlaps the root filesystem build (CPU, disk).
        wheels = pool.submit(ensure_wheelhouse, _read_runtime_requirements(), settings.cache_dir, progress)
        debian = ensure_debian_python_image(settings, progress)
        wheels.result()
    image = inspect_image(debian)
    if image is None:
        raise UserError(f"The offline parent image {debian} vanished right after it was imported.")
    return Parent(debian, image["Id"], True, reason)


def image_exists(tag: str) -> bool:
    return inspect_image(tag) is not None


def image_digest(tag: str) -> str:
    """The local image's content id (`sha256:...`), the identity recorded with results."""
    image = inspect_image(tag)
    if image is None:
        raise UserError(f"Image {tag} does not exist.", hint="build it with `gym-compose build`")
    return image["Id"]


def image_size(tag: str) -> int:
    """Bytes of the image including its parents' layers."""
    image = inspect_image(tag)
    if image is None:
        raise UserError(f"Image {tag} does not exist.", hint="build it with `gym-compose build`")
    return int(image["Size"])


def image_name(implementation: str) -> str:
    """A valid Docker repository name component for an implementation folder name."""
    name = re.sub(r"[^a-z0-9._-]+", "-", implementation.lower()).strip("._-")
    if not name:
        raise UserError(f"Cannot derive an image name from implementation folder {implementation!r}.")
    return name


def server_dockerfile(has_requirements: bool) -> str:
    template = "server-requirements.Dockerfile" if has_requirements else "server.Dockerfile"
    return (DOCKER_DIR / template).read_text()


def _is_offline_base(base_tag: str, settings: ImageSettings) -> bool:
    image = inspect_image(base_tag)
    if image is None:
        raise UserError(f"Base image {base_tag} does not exist.", hint="build it first with ensure_base_image()")
    labels = (image.get("Config") or {}).get("Labels") or {}
    return labels.get(f"{IMAGE_LABEL}.parent", "").startswith(f"{settings.image_prefix}/debian-python:")


def _read_runtime_requirements() -> str:
    if not RUNTIME_REQUIREMENTS.is_file():
        raise UserError(f"{RUNTIME_REQUIREMENTS} is missing; the base image cannot be built without it.")
    return RUNTIME_REQUIREMENTS.read_text()


class _build_context:
    """A scratch folder next to the cache (same file system, so wheels are hard-linked)."""

    def __init__(self, settings: ImageSettings):
        self.parent = settings.cache_dir / "contexts"

    def __enter__(self) -> Path:
        self.parent.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(dir=self.parent))
        return self.path

    def __exit__(self, *exc_info) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _link_wheels(wheelhouse: Path, target: Path) -> None:
    for wheel in wheelhouse.glob("*.whl"):
        _link_file(wheel, target / wheel.name)


def _link_file(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _copy_files(root: Path, files: list[Path], target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for relative in files:
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / relative, destination)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
