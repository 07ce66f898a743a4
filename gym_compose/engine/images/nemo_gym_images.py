"""Images of the NeMo Gym runtime: one shared runtime image, and a thin image per server.

`gym-compose/nemo-gym-runtime:<hash>` holds the real nemo-gym package and all its dependencies
(~1 GB) once; a server image on it adds only the server's own requirements and its code at
/srv/gym/<server_type>/<name>/ (with the other servers of its search root that it imports), so the
disk cost of NeMo Gym is paid once per machine, not per server. Offline (no registry) the parent
is Debian trixie's Python 3.13 made with mmdebstrap and every wheel comes from a host wheelhouse,
as for the lean base (docs/images.md, docs/nemo-gym-runtime.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePosixPath

from gym_compose.contract import NEMO_GYM_SEARCH_ROOT
from gym_compose.engine import docker_cli
from gym_compose.engine.images.build_context import (
    BuildContext,
    build_lock,
    copy_files,
    image_exists,
    image_name,
    link_wheels,
)
from gym_compose.engine.images.debian_base import ensure_nemo_gym_python_image
from gym_compose.engine.images.image_build import build_image, inspect_image
from gym_compose.engine.images.image_hash import ContentHash, tree_files
from gym_compose.engine.images.image_settings import IMAGE_LABEL, NEMO_GYM_PLATFORM, ImageSettings
from gym_compose.engine.images.lean_images import (
    CONTAINER_MODULES,
    DOCKER_DIR,
    OFFLINE_PIP_OPTIONS,
    PACKAGE_DIR,
    PULL_TIMEOUT_S,
    SERVER_SKIPPED,
    is_offline_base,
)
from gym_compose.engine.images.wheelhouse import ensure_wheelhouse, pinned_versions
from gym_compose.errors import UserError
from gym_compose.plan.requirements import server_requirements, shadowing_pins

Progress = Callable[[str], None]

RUNTIME_DOCKERFILE = DOCKER_DIR / "nemo-gym-runtime.Dockerfile"
SERVER_DOCKERFILE = DOCKER_DIR / "nemo-gym-server.Dockerfile"
CODE_ONLY_DOCKERFILE = DOCKER_DIR / "nemo-gym-server-code.Dockerfile"  # no requirements beyond nemo-gym
RUNTIME_REQUIREMENTS = DOCKER_DIR / "nemo-gym-requirements.txt"
PUBLIC_PARENT = "python:3.13-slim"


def ensure_nemo_gym_runtime_image(base_tag: str, progress: Progress = print) -> str:
    """Tag of `gym-compose/nemo-gym-runtime:<hash>`; offline exactly when the lean base is."""
    settings = ImageSettings.from_env()
    offline = is_offline_base(base_tag, settings)
    requirements = RUNTIME_REQUIREMENTS.read_text()
    parent = _parent(settings, offline, progress)
    parent_image = inspect_image(parent)
    if parent_image is None:
        raise UserError(f"The NeMo Gym runtime's parent image {parent} is not available locally.")
    dockerfile = RUNTIME_DOCKERFILE.read_text()
    sources = [path for path in tree_files(PACKAGE_DIR) if path.parts[0] in CONTAINER_MODULES]
    tag = settings.image_prefix + "/nemo-gym-runtime:" + (
        ContentHash()
        .add_text("dockerfile", dockerfile)
        .add_text("requirements", requirements)
        .add_text("parent", parent_image["Id"])
        .add_text("pip-options", OFFLINE_PIP_OPTIONS if offline else "")
        .add_tree("gym_compose", PACKAGE_DIR, sources)
        .hexdigest()
    )
    if image_exists(tag):
        progress(f"NeMo Gym runtime image {tag} is up to date")
        return tag
    with build_lock(settings, tag), BuildContext(settings) as context:
        if image_exists(tag):
            return tag
        progress(f"building NeMo Gym runtime image {tag} (nemo-gym and its dependencies, once for all servers)")
        (context / "wheels").mkdir()
        if offline:
            wheels = ensure_wheelhouse(requirements, settings.cache_dir, progress, platform=NEMO_GYM_PLATFORM)
            link_wheels(wheels, context / "wheels")
        (context / "Dockerfile").write_text(dockerfile)
        (context / "requirements.txt").write_text(requirements)
        copy_files(PACKAGE_DIR, sources, context / "gym_compose")
        build_args = {"PARENT_IMAGE": parent, "PIP_INSTALL_OPTIONS": OFFLINE_PIP_OPTIONS if offline else ""}
        build_image(context, tag, build_args=build_args, progress=progress, verbose=settings.verbose)
    return tag


def ensure_nemo_gym_server_image(implementation_dir: Path, server_type: str, siblings: tuple[str, ...],
                                 runtime_tag: str, progress: Progress = print,
                                 referenced: tuple[str, ...] = ()) -> str:
    """Tag of `gym-compose/<name>-nemo-gym:<hash>`: the runtime, the server's requirements, and its
    code (plus the sibling servers it imports, `server_type/name` under its search root, and the
    files and folders of that root its config names, plan/referenced_files.py)."""
    settings = ImageSettings.from_env()
    implementation_dir = Path(implementation_dir).resolve()
    root = implementation_dir.parent.parent
    folders = {f"{server_type}/{implementation_dir.name}": implementation_dir}
    folders.update({sibling: root / sibling for sibling in siblings})
    folders.update({path: root / path for path in referenced if (root / path).is_dir()})
    requirements = server_requirements(implementation_dir)
    dockerfile = (SERVER_DOCKERFILE if requirements.strip() else CODE_ONLY_DOCKERFILE).read_text()
    offline = _runtime_is_offline(runtime_tag)
    digest = ContentHash().add_text("dockerfile", dockerfile).add_text("runtime", runtime_tag)
    digest.add_text("requirements", requirements)
    files: dict[str, list[Path]] = {}
    for target, folder in sorted(folders.items()):
        files[target] = tree_files(folder, skip=SERVER_SKIPPED)
    for path in referenced:  # a single file: its folder in the image holds that file alone
        if (root / path).is_file():
            parent = PurePosixPath(path).parent.as_posix()
            folders.setdefault(parent, root / parent)
            files.setdefault(parent, []).append(Path(PurePosixPath(path).name))
    for target, folder in sorted(folders.items()):
        digest.add_tree(target, folder, files[target])
    tag = f"{settings.image_prefix}/{image_name(implementation_dir.name)}-nemo-gym:{digest.hexdigest()}"
    if image_exists(tag):
        progress(f"server image {tag} is up to date (NeMo Gym runtime)")
        return tag
    with build_lock(settings, tag), BuildContext(settings) as context:
        if image_exists(tag):
            return tag
        (context / "wheels").mkdir()
        shadow: dict[str, tuple[str, str]] = {}
        if requirements.strip() and offline:
            runtime_requirements = RUNTIME_REQUIREMENTS.read_text()
            runtime = ensure_wheelhouse(runtime_requirements, settings.cache_dir, progress, platform=NEMO_GYM_PLATFORM)
            own = ensure_wheelhouse(requirements, settings.cache_dir, progress, constraints=pinned_versions(runtime),
                                    find_links=(runtime,), platform=NEMO_GYM_PLATFORM, release_clashes=True,
                                    resolve_with=runtime_requirements)
            shadow = shadowing_pins(pinned_versions(own), pinned_versions(runtime))
            link_wheels(own, context / "wheels")
        progress(f"building server image {tag} (NeMo Gym runtime){_describe_shadow(shadow)}")
        (context / "Dockerfile").write_text(dockerfile)
        (context / "requirements.txt").write_text(requirements)
        (context / "shadow.txt").write_text("".join(f"{pin}\n" for pin, _ in shadow.values()))
        for target, folder in folders.items():
            copy_files(folder, files[target], context / "gym" / target)
        build_args = {
            "RUNTIME_IMAGE": runtime_tag,
            "SERVER_DIR": f"{NEMO_GYM_SEARCH_ROOT}/{server_type}/{implementation_dir.name}",
        }
        if requirements.strip():
            build_args["PIP_INSTALL_OPTIONS"] = OFFLINE_PIP_OPTIONS if offline else ""
        build_image(context, tag, build_args=build_args, progress=progress, verbose=settings.verbose)
    return tag


def _describe_shadow(shadow: dict[str, tuple[str, str]]) -> str:
    if not shadow:
        return ""
    pins = ", ".join(f"{pin} (runtime {version})" for pin, version in shadow.values())
    return f"; its own {pins} shadow the runtime's"


def _parent(settings: ImageSettings, offline: bool, progress: Progress) -> str:
    if offline:
        return ensure_nemo_gym_python_image(settings, progress)
    if inspect_image(PUBLIC_PARENT) is None:
        docker_cli.run_docker(["pull", "--quiet", PUBLIC_PARENT], timeout=PULL_TIMEOUT_S, retries=2)
    return PUBLIC_PARENT


def _runtime_is_offline(runtime_tag: str) -> bool:
    image = inspect_image(runtime_tag)
    if image is None:
        raise UserError(f"NeMo Gym runtime image {runtime_tag} does not exist.")
    labels = (image.get("Config") or {}).get("Labels") or {}
    return labels.get(f"{IMAGE_LABEL}.parent", "") != PUBLIC_PARENT
