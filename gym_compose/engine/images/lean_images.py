"""Images: the base (Python + gym_compose runtime) and one per server implementation.

Tags carry a hash of everything that goes into the image, so an unchanged image is never
rebuilt. The base's parent is a public Python image; when it cannot be pulled (no registry),
or GYM_COMPOSE_OFFLINE=1, an offline Debian image and a host-side wheelhouse are used instead.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from gym_compose.contract import SERVER_DIR
from gym_compose.engine import docker_cli
from gym_compose.engine.images import saved_images
from gym_compose.engine.images.build_context import (
    build_lock,
    copy_files,
    ensure_built,
    image_exists,
    image_name,
    link_file,
    link_wheels,
)
from gym_compose.engine.images.committed_image import STAGING, commit_image, read_changes
from gym_compose.engine.images.debian_base import (
    debian_python_tag,
    ensure_debian_build_image,
    ensure_debian_python_image,
)
from gym_compose.engine.images.image_build import build_image, inspect_image, known_missing
from gym_compose.engine.images.image_hash import ContentHash, tree_files
from gym_compose.engine.images.image_settings import IMAGE_LABEL, PYTHON_VERSION, ImageSettings
from gym_compose.engine.images.native_build import (
    IMAGE_SETUP,
    NATIVE_PREPARE,
    NativeSources,
    ensure_native_sources,
    native_env,
)
from gym_compose.engine.images.wheelhouse import ensure_wheelhouse, pinned_versions
from gym_compose.errors import UserError
from gym_compose.paths import PROJECT_ROOT
from gym_compose.plan.requirements import native_requirements, server_requirements, with_extra_requirements

Progress = Callable[[str], None]

PACKAGE_DIR = PROJECT_ROOT / "gym_compose"
DOCKER_DIR = PROJECT_ROOT / "docker"
RUNTIME_REQUIREMENTS = DOCKER_DIR / "runtime-requirements.txt"
# The part of the package that runs in containers (docs/architecture.md): the rest is host-only,
# and leaving it out keeps edits to it from rebuilding the base.
CONTAINER_MODULES = frozenset({"__init__.py", "errors.py", "contract.py", "server", "collect", "sandbox", "net",
                               "metrics"})
# Never copied into a server image: tests and caches (data/ and configs/ are).
SERVER_SKIPPED = ("tests",)
PULL_TIMEOUT_S = 900
OFFLINE_PIP_OPTIONS = "--no-index"
SERVER_REQUIREMENTS_SCRIPT = DOCKER_DIR / "server-requirements.sh"
# A server image with no requirements: the base plus the folder's files, made by copying them into
# a container of the base and committing it with the server label (no Dockerfile, one commit).
# This text stands for that recipe in the image's hash; with requirements, the script's text does.
PLAIN_SERVER_RECIPE = f"copy server/ to {SERVER_DIR}/; LABEL {IMAGE_LABEL}=server {IMAGE_LABEL}.base=<base>"


@dataclass(frozen=True)
class Parent:
    """The image the base is built FROM, and how it was obtained. `identity` names its content (the
    image id; for the offline image its content-hashed tag), known before the image itself is
    needed: the offline one is imported only for a build (`ensure()`), not for a load from the cache."""

    image: str
    identity: str
    offline: bool
    reason: str
    ensure: Callable[[], str]


BASE_VENV_SCRIPT = DOCKER_DIR / "base-venv.sh"
BASE_RUNTIME_SCRIPT = DOCKER_DIR / "base-runtime.sh"
BASE_CHANGES = DOCKER_DIR / "base.changes"


@dataclass(frozen=True)
class BaseInputs:
    """Everything from this checkout that goes into the base image: its two halves, the venv (the
    requirements; rebuilt rarely) and the runtime (the package's container modules)."""

    venv_script: str
    runtime_script: str
    changes: str
    requirements: str
    sources: list[Path]

    @classmethod
    def read(cls) -> "BaseInputs":
        return cls(
            venv_script=BASE_VENV_SCRIPT.read_text(),
            runtime_script=BASE_RUNTIME_SCRIPT.read_text(),
            changes=BASE_CHANGES.read_text(),
            requirements=_read_runtime_requirements(),
            sources=[path for path in tree_files(PACKAGE_DIR) if path.parts[0] in CONTAINER_MODULES],
        )

    def venv_tag(self, prefix: str, parent: str, offline: bool) -> str:
        """`parent` identifies the parent's content: its image id, or the offline Debian image's
        content-hashed tag (`docker import` gives a new id on every import of the same rootfs)."""
        digest = (
            ContentHash()
            .add_text("script", self.venv_script)
            .add_text("requirements", self.requirements)
            .add_text("parent", parent)
            .add_text("pip-options", OFFLINE_PIP_OPTIONS if offline else "")
            .add_text("python", PYTHON_VERSION)
            .add_text("prefix", prefix)
            .hexdigest()
        )
        return f"{prefix}/base-venv:{digest}"

    def tag(self, prefix: str, parent: str, offline: bool) -> str:
        digest = (
            ContentHash()
            .add_text("venv", self.venv_tag(prefix, parent, offline))
            .add_text("script", self.runtime_script)
            .add_text("changes", self.changes)
            .add_tree("gym_compose", PACKAGE_DIR, self.sources)
            .hexdigest()
        )
        return f"{prefix}/base:{digest}"


def ensure_base_image(progress: Progress = print) -> str:
    """Tag of the local base image `gym-compose/base:<hash>`: found, loaded from the host cache
    (saved_images), or built in two committed containers (base-venv.sh, base-runtime.sh) and saved."""
    settings = ImageSettings.from_env()
    inputs = BaseInputs.read()
    if not settings.offline and (known_missing(settings.public_base) or inspect_image(settings.public_base) is None):
        # An up-to-date offline base is used as is: no pull attempt (slow where DNS hangs).
        ready = inputs.tag(settings.image_prefix, debian_python_tag(settings), offline=True)
        if image_exists(ready) or saved_images.archive_path(settings, ready).is_file():
            with build_lock(settings, ready):
                if image_exists(ready) or saved_images.load_saved(settings, ready, progress):
                    progress(f"base image {ready} is up to date (offline bootstrap; {settings.public_base} "
                             "is not local)")
                    return ready
    parent = choose_parent(settings, progress)
    tag = inputs.tag(settings.image_prefix, parent.identity, parent.offline)

    def build(context: Path) -> None:
        venv = _ensure_base_venv(settings, inputs, parent, progress)
        (context / "base-runtime.sh").write_text(inputs.runtime_script)
        copy_files(PACKAGE_DIR, inputs.sources, context / "gym_compose")
        commit_image(venv, tag, copies=[(context, STAGING)], script=("sh", f"{STAGING}/base-runtime.sh"),
                     changes=read_changes(BASE_CHANGES, PARENT_IMAGE=parent.image, IMAGE_PREFIX=settings.image_prefix),
                     progress=progress, verbose=settings.verbose)

    return ensure_built(tag, settings, progress, "base image", build, note=parent.reason, saved=True)


def _ensure_base_venv(settings: ImageSettings, inputs: BaseInputs, parent: Parent, progress: Progress) -> str:
    tag = inputs.venv_tag(settings.image_prefix, parent.identity, parent.offline)

    def build(context: Path) -> None:
        image = parent.ensure()
        (context / "wheels").mkdir()
        if parent.offline:
            link_wheels(ensure_wheelhouse(inputs.requirements, settings.cache_dir, progress), context / "wheels")
        (context / "base-venv.sh").write_text(inputs.venv_script)
        (context / "runtime-requirements.txt").write_text(inputs.requirements)
        pip_options = OFFLINE_PIP_OPTIONS if parent.offline else ""
        changes = [f"LABEL {IMAGE_LABEL}=base-venv {IMAGE_LABEL}.prefix={settings.image_prefix}"]
        script = ("sh", f"{STAGING}/base-venv.sh", PYTHON_VERSION, pip_options)
        commit_image(image, tag, copies=[(context, STAGING)], script=script, changes=changes, progress=progress,
                     verbose=settings.verbose)

    return ensure_built(tag, settings, progress, "base venv image", build)


def ensure_server_image(implementation_dir: Path, base_tag: str, progress: Progress = print,
                        extra_requirements: tuple[str, ...] = ()) -> str:
    """Tag of `gym-compose/<impl>:<hash>`: the base plus the implementation folder at /srv/server
    and the packages of its requirements.txt and `extra_requirements` (the plan's, e.g. `mcp` for a
    server serving /mcp), and of native-requirements.txt, compiled in a build stage; built when missing."""
    settings = ImageSettings.from_env()
    implementation_dir = Path(implementation_dir)
    if not implementation_dir.is_dir():
        raise UserError(
            f"Server implementation folder {implementation_dir} does not exist.",
            hint="check the implementation name in the config and the search roots (--search-dir)",
        )
    native = native_requirements(implementation_dir)
    builder = None
    if native:  # the folder's native-* files are in the tree already; the build image is not
        builder = _native_builder(settings, is_offline_base(base_tag, settings), progress)
    tag, files, requirements, dockerfile = _server_recipe(implementation_dir, base_tag, settings, native, builder,
                                                          extra_requirements)

    def build(context: Path) -> None:
        offline = is_offline_base(base_tag, settings)  # asked only for a build: the tag does not depend on it
        if not native:  # no Dockerfile: the files (and the requirements' install) in one container, one commit
            _committed_server(context, tag, base_tag, implementation_dir, files, requirements, offline, settings,
                              progress)
            return
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
            link_wheels(own, context / "wheels")
        (context / "Dockerfile").write_text(dockerfile)
        (context / "requirements.txt").write_text(requirements)
        copy_files(implementation_dir, files, context / "server")
        build_image(context, tag, build_args=build_args, progress=progress, verbose=settings.verbose)

    return ensure_built(tag, settings, progress, "server image", build)


def _server_recipe(implementation_dir: Path, base_tag: str, settings: ImageSettings, native: str,
                   builder: dict | None, extra_requirements: tuple[str, ...] = ()) -> tuple[str, list[Path], str, str]:
    """A server image's tag (a hash of everything that goes into it), its files, requirements and
    recipe; `builder`: the build stage's image, for one with native requirements."""
    files = tree_files(implementation_dir, skip=SERVER_SKIPPED)
    requirements = with_extra_requirements(server_requirements(implementation_dir), extra_requirements)
    dockerfile = (DOCKER_DIR / "server-native.Dockerfile").read_text() if native else \
        SERVER_REQUIREMENTS_SCRIPT.read_text() if requirements else PLAIN_SERVER_RECIPE
    digest = (
        ContentHash()
        .add_text("dockerfile", dockerfile)
        .add_text("base", base_tag)
        .add_text("requirements", requirements)
        .add_tree("server", implementation_dir, files)
    )
    if builder is not None:
        digest.add_text("builder", builder["Id"])
    return f"{settings.image_prefix}/{image_name(implementation_dir.name)}:{digest.hexdigest()}", files, \
        requirements, dockerfile


def expected_tags(implementation_dirs: Iterable[Path | tuple[Path, tuple[str, ...]]]) -> list[str]:
    """The images `ensure_base_image` and then `ensure_server_image` for these folders will ask the
    engine about, as far as they are known without asking it: for `inspected_together`, one engine
    call for all. The base is the offline one (what it is with GYM_COMPOSE_OFFLINE set, or the
    public Python image not local; when that image is here, it is asked for too and the rest is
    asked as before); a folder with native requirements is left out (its tag holds the build
    image's id)."""
    settings = ImageSettings.from_env()
    base = BaseInputs.read().tag(settings.image_prefix, debian_python_tag(settings), offline=True)
    tags = ([] if settings.offline else [settings.public_base]) + [base]
    wanted = [(Path(d[0]), d[1]) if isinstance(d, tuple) else (Path(d), ()) for d in implementation_dirs]
    for folder, extra in dict.fromkeys(wanted):
        if folder.is_dir() and not native_requirements(folder):
            tags.append(_server_recipe(folder, base, settings, "", None, extra)[0])
    return tags


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
        link_file(sdist, target / "sdists" / sdist.name)
    build_requirements = "".join(f"{line}\n" for line in sources.build_requires)
    link_wheels(ensure_wheelhouse(build_requirements, settings.cache_dir, progress), target / "build-wheels")
    (target / "build-requirements.txt").write_text(build_requirements)
    (target / "native-build.env").write_text(native_env(implementation_dir))
    if (implementation_dir / NATIVE_PREPARE).is_file():
        shutil.copy2(implementation_dir / NATIVE_PREPARE, target / NATIVE_PREPARE)


def choose_parent(settings: ImageSettings, progress: Progress) -> Parent:
    """The public Python image when it is here or can be pulled, else the offline Debian image."""
    if not settings.offline:
        local = inspect_image(settings.public_base)
        if local is not None:
            return _public_parent(settings.public_base, local["Id"], f"from {settings.public_base}")
        pulled = docker_cli.run_docker(
            ["pull", "--quiet", settings.public_base], timeout=PULL_TIMEOUT_S, retries=2, check=False
        )
        if pulled.ok:
            image = inspect_image(settings.public_base)
            if image is not None:
                return _public_parent(settings.public_base, image["Id"], f"pulled {settings.public_base}")
        why = _last_line(pulled.stderr or pulled.stdout) or "pull failed"
        progress(f"base image: cannot pull {settings.public_base} ({why}); taking the offline path")
        reason = "offline bootstrap"
    else:
        reason = "offline bootstrap, GYM_COMPOSE_OFFLINE is set"
    debian = debian_python_tag(settings)
    return Parent(debian, debian, True, reason, lambda: _offline_parent(settings, progress))


def _public_parent(image: str, image_id: str, reason: str) -> Parent:
    return Parent(image, image_id, False, reason, lambda: image)


def _offline_parent(settings: ImageSettings, progress: Progress) -> str:
    with ThreadPoolExecutor(max_workers=1) as pool:
        # The runtime's wheel download (network) overlaps the root filesystem build (CPU, disk).
        wheels = pool.submit(ensure_wheelhouse, _read_runtime_requirements(), settings.cache_dir, progress)
        debian = ensure_debian_python_image(settings, progress)
        wheels.result()
    if inspect_image(debian) is None:
        raise UserError(f"The offline parent image {debian} vanished right after it was imported.")
    return debian


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


def _committed_server(context: Path, tag: str, base_tag: str, implementation_dir: Path, files: list[Path],
                      requirements: str, offline: bool, settings: ImageSettings, progress: Progress) -> None:
    """A server image without compiled packages: its files copied to /srv/server of a container of
    the base, its requirements (if any) installed there by server-requirements.sh, committed."""
    copy_files(implementation_dir, files, context / "server")
    copies = [(context / "server", SERVER_DIR)]
    script: tuple[str, ...] = ()
    if requirements:
        staging = context / "staging"
        (staging / "wheels").mkdir(parents=True)
        if offline:
            runtime = ensure_wheelhouse(_read_runtime_requirements(), settings.cache_dir, progress)
            own = ensure_wheelhouse(requirements, settings.cache_dir, progress, constraints=pinned_versions(runtime),
                                    find_links=(runtime,))
            link_wheels(own, staging / "wheels")
        (staging / "requirements.txt").write_text(requirements)
        (staging / SERVER_REQUIREMENTS_SCRIPT.name).write_text(SERVER_REQUIREMENTS_SCRIPT.read_text())
        copies.append((staging, STAGING))
        script = ("sh", f"{STAGING}/{SERVER_REQUIREMENTS_SCRIPT.name}", OFFLINE_PIP_OPTIONS if offline else "")
    commit_image(base_tag, tag, copies=copies, script=script,
                 changes=[f"LABEL {IMAGE_LABEL}=server {IMAGE_LABEL}.base={base_tag}"],
                 progress=progress, verbose=settings.verbose)


def is_offline_base(base_tag: str, settings: ImageSettings) -> bool:
    image = inspect_image(base_tag)
    if image is None:
        raise UserError(f"Base image {base_tag} does not exist.", hint="build it first with ensure_base_image()")
    labels = (image.get("Config") or {}).get("Labels") or {}
    return labels.get(f"{IMAGE_LABEL}.parent", "").startswith(f"{settings.image_prefix}/debian-python:")


def _read_runtime_requirements() -> str:
    if not RUNTIME_REQUIREMENTS.is_file():
        raise UserError(f"{RUNTIME_REQUIREMENTS} is missing; the base image cannot be built without it.")
    return RUNTIME_REQUIREMENTS.read_text()


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
