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

from gym_compose.contract import NEMO_GYM_SEARCH_ROOT, RUNTIME_ROOT
from gym_compose.engine import docker_cli
from gym_compose.engine.images.build_context import (
    BuildContext,
    build_lock,
    copy_files,
    ensure_built,
    image_exists,
    image_name,
    link_wheels,
)
from gym_compose.engine.images.committed_image import STAGING, commit_image, read_changes
from gym_compose.engine.images.debian_base import ensure_nemo_gym_python_image
from gym_compose.engine.images.image_build import inspect_image
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

RUNTIME_VENV_SCRIPT = DOCKER_DIR / "nemo-gym-runtime-venv.sh"
RUNTIME_CHANGES = DOCKER_DIR / "nemo-gym-runtime.changes"
SERVER_SCRIPT = DOCKER_DIR / "nemo-gym-server.sh"
RUNTIME_REQUIREMENTS = DOCKER_DIR / "nemo-gym-requirements.txt"
PUBLIC_PARENT = "python:3.13-slim"
# NeMo Gym's sandbox registry finds provider `gym_compose` (the project's sandbox broker) through this
# entry point; RUNTIME_ROOT is on sys.path (the .pth file nemo-gym-runtime-venv.sh writes), so
# importlib.metadata reads the dist-info there.
ENTRY_POINT = ("sandbox/nemo_gym_entry_point", "gym_compose_sandbox_provider-1.0.dist-info")

# Both images are containers committed once (committed_image), not Dockerfiles: on Docker 20.10's
# classic builder every instruction committed a layer over the ~1.5 GB runtime (50-60 s a step on
# the shared machine), and the venv, built in one stage and copied into the next, was written twice.


def ensure_nemo_gym_runtime_image(base_tag: str, progress: Progress = print) -> str:
    """Tag of `gym-compose/nemo-gym-runtime:<hash>`; offline exactly when the lean base is. Two
    committed containers: the venv (`nemo-gym-runtime-venv`, rebuilt only for new requirements or a
    new parent) and the gym_compose container modules on it."""
    settings = ImageSettings.from_env()
    offline = is_offline_base(base_tag, settings)
    parent = _parent(settings, offline, progress)
    venv_tag = _ensure_runtime_venv(settings, parent, offline, progress)
    changes = RUNTIME_CHANGES.read_text()
    sources = [path for path in tree_files(PACKAGE_DIR) if path.parts[0] in CONTAINER_MODULES]
    tag = settings.image_prefix + "/nemo-gym-runtime:" + (
        ContentHash()
        .add_text("changes", changes)
        .add_text("venv", venv_tag)
        .add_tree("gym_compose", PACKAGE_DIR, sources)
        .hexdigest()
    )

    def build(context: Path) -> None:
        copy_files(PACKAGE_DIR, sources, context / "gym_compose")
        entry_point, dist_info = ENTRY_POINT
        copies = [(context / "gym_compose", f"{RUNTIME_ROOT}/gym_compose"),
                  (context / "gym_compose" / entry_point, f"{RUNTIME_ROOT}/{dist_info}")]
        commit_image(venv_tag, tag, copies=copies, changes=read_changes(RUNTIME_CHANGES, PARENT_IMAGE=parent),
                     progress=progress, verbose=settings.verbose)

    return ensure_built(tag, settings, progress, "NeMo Gym runtime image", build,
                        note="the gym_compose container modules on the NeMo Gym venv")


def _ensure_runtime_venv(settings: ImageSettings, parent: str, offline: bool, progress: Progress) -> str:
    parent_image = inspect_image(parent)
    if parent_image is None:
        raise UserError(f"The NeMo Gym runtime's parent image {parent} is not available locally.")
    requirements = RUNTIME_REQUIREMENTS.read_text()
    script = RUNTIME_VENV_SCRIPT.read_text()
    pip_options = OFFLINE_PIP_OPTIONS if offline else ""
    tag = settings.image_prefix + "/nemo-gym-runtime-venv:" + (
        ContentHash()
        .add_text("script", script)
        .add_text("requirements", requirements)
        .add_text("parent", parent_image["Id"])
        .add_text("pip-options", pip_options)
        .hexdigest()
    )

    def build(context: Path) -> None:
        (context / "wheels").mkdir()
        if offline:
            wheels = ensure_wheelhouse(requirements, settings.cache_dir, progress, platform=NEMO_GYM_PLATFORM)
            link_wheels(wheels, context / "wheels")
        (context / RUNTIME_VENV_SCRIPT.name).write_text(script)
        (context / "requirements.txt").write_text(requirements)
        changes = [f"LABEL {IMAGE_LABEL}=nemo-gym-runtime-venv {IMAGE_LABEL}.parent={parent}"]
        commit_image(parent, tag, copies=[(context, STAGING)], changes=changes, progress=progress,
                     script=("sh", f"{STAGING}/{RUNTIME_VENV_SCRIPT.name}", pip_options), verbose=settings.verbose)

    return ensure_built(tag, settings, progress, "NeMo Gym runtime venv image", build,
                        note="nemo-gym and its dependencies, once for all servers")


def ensure_nemo_gym_server_image(implementation_dir: Path, server_type: str, siblings: tuple[str, ...],
                                 runtime_tag: str, progress: Progress = print,
                                 referenced: tuple[str, ...] = ()) -> str:
    """Tag of `gym-compose/<name>-nemo-gym:<hash>`: the runtime, the server's requirements, and its
    code (plus the sibling servers it imports, `server_type/name` under its search root, and the
    files and folders of that root its config names, plan/referenced_files.py): one container of
    the runtime, committed (nemo-gym-server.sh)."""
    settings = ImageSettings.from_env()
    implementation_dir = Path(implementation_dir).resolve()
    root = implementation_dir.parent.parent
    folders = {f"{server_type}/{implementation_dir.name}": implementation_dir}
    folders.update({sibling: root / sibling for sibling in siblings})
    folders.update({path: root / path for path in referenced if (root / path).is_dir()})
    requirements = server_requirements(implementation_dir)
    script = SERVER_SCRIPT.read_text()
    server_dir = f"{NEMO_GYM_SEARCH_ROOT}/{server_type}/{implementation_dir.name}"
    offline = _runtime_is_offline(runtime_tag)
    digest = ContentHash().add_text("script", script).add_text("runtime", runtime_tag)
    digest.add_text("requirements", requirements).add_text("server-dir", server_dir)
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
        staging = context / "staging"
        staging.mkdir()
        (staging / SERVER_SCRIPT.name).write_text(script)
        shadow: dict[str, tuple[str, str]] = {}
        pip_options = ""
        if requirements.strip():
            (staging / "wheels").mkdir()
            if offline:
                runtime_requirements = RUNTIME_REQUIREMENTS.read_text()
                runtime = ensure_wheelhouse(runtime_requirements, settings.cache_dir, progress,
                                            platform=NEMO_GYM_PLATFORM)
                own = ensure_wheelhouse(requirements, settings.cache_dir, progress,
                                        constraints=pinned_versions(runtime), find_links=(runtime,),
                                        platform=NEMO_GYM_PLATFORM, release_clashes=True,
                                        resolve_with=runtime_requirements)
                shadow = shadowing_pins(pinned_versions(own), pinned_versions(runtime))
                link_wheels(own, staging / "wheels")
                pip_options = OFFLINE_PIP_OPTIONS
            (staging / "requirements.txt").write_text(requirements)
            (staging / "shadow.txt").write_text("".join(f"{pin}\n" for pin, _ in shadow.values()))
        progress(f"building server image {tag} (NeMo Gym runtime){_describe_shadow(shadow)}")
        for target, folder in folders.items():
            copy_files(folder, files[target], context / "gym" / target)
        changes = [f"ENV GYM_COMPOSE_SERVER_DIR={server_dir} PYTHONPATH={NEMO_GYM_SEARCH_ROOT}:/opt/server-packages",
                   f"LABEL {IMAGE_LABEL}=server {IMAGE_LABEL}.base={runtime_tag} {IMAGE_LABEL}.runtime=nemo_gym"]
        commit_image(runtime_tag, tag, copies=[(context / "gym", NEMO_GYM_SEARCH_ROOT), (staging, STAGING)],
                     script=("sh", f"{STAGING}/{SERVER_SCRIPT.name}", pip_options), changes=changes,
                     progress=progress, verbose=settings.verbose)
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
