"""The offline parent image: a Debian root filesystem with Python, made by mmdebstrap, imported.

Used when the public Python image cannot be pulled. The rootfs tarball is cached on the host,
keyed by the options that make it, so it is built once per machine.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from gym_compose.engine import docker_cli
from gym_compose.engine.build_lock import file_lock
from gym_compose.engine.image_build import inspect_image
from gym_compose.engine.image_hash import ContentHash
from gym_compose.engine.image_settings import DEBIAN_SUITE, IMAGE_LABEL, ImageSettings
from gym_compose.errors import UserError

MMDEBSTRAP_TIMEOUT_S = 900
IMPORT_TIMEOUT_S = 600
PACKAGES = ("python3", "python3-venv")
# Documentation, manual pages and translations are of no use in a server container.
_EXCLUDED_PATHS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
)


def image_changes(settings: ImageSettings) -> list[str]:
    """`docker import --change` lines. The labels are inherited by every image built on top,
    intermediate ones included, so that all of them can be found (and removed) by label."""
    return [
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        'CMD ["python3"]',
        f"LABEL {IMAGE_LABEL}=debian-python {IMAGE_LABEL}.prefix={settings.image_prefix}",
    ]


def mmdebstrap_command(settings: ImageSettings, output: Path) -> list[str]:
    command = ["mmdebstrap", "--variant=essential", "--include=" + ",".join(PACKAGES)]
    command += [f"--dpkgopt={option}" for option in _EXCLUDED_PATHS]
    command += [DEBIAN_SUITE, str(output)]
    if settings.debian_mirror:
        command.append(settings.debian_mirror)
    return command


def rootfs_key(settings: ImageSettings) -> str:
    """Names the cached root filesystem: everything that decides its content."""
    return ContentHash().add_text("mmdebstrap", " ".join(mmdebstrap_command(settings, Path("rootfs.tar")))).hexdigest()


def debian_python_tag(settings: ImageSettings) -> str:
    digest = (
        ContentHash()
        .add_text("rootfs", rootfs_key(settings))
        .add_text("changes", "\n".join(image_changes(settings)))
        .hexdigest()
    )
    return f"{settings.image_prefix}/debian-python:{digest}"


def ensure_debian_python_image(settings: ImageSettings, progress: Callable[[str], None]) -> str:
    """Tag of a local image with Debian's Python 3 (built and imported when missing)."""
    tag = debian_python_tag(settings)
    if inspect_image(tag) is not None:
        return tag
    with file_lock(settings.cache_dir / "locks" / "debian-python.lock"):
        if inspect_image(tag) is not None:
            return tag
        rootfs = settings.cache_dir / "rootfs" / f"{rootfs_key(settings)}.tar"
        if not rootfs.exists():
            _make_rootfs(settings, rootfs, progress)
        progress(f"offline base: importing {rootfs.name} as {tag}")
        changes = [arg for change in image_changes(settings) for arg in ("--change", change)]
        docker_cli.run_docker(["import", *changes, str(rootfs), tag], timeout=IMPORT_TIMEOUT_S)
    return tag


def _make_rootfs(settings: ImageSettings, rootfs: Path, progress: Callable[[str], None]) -> None:
    if shutil.which("mmdebstrap") is None:
        raise UserError(
            "The base image cannot be pulled and mmdebstrap, which builds it offline, is not installed.",
            hint="install it (`sudo apt-get install mmdebstrap`, or run scripts/setup), or make a registry "
            "reachable, or point GYM_COMPOSE_BASE_IMAGE at a local Python 3.11 image",
        )
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    partial = rootfs.with_suffix(".partial.tar")
    command = mmdebstrap_command(settings, partial)
    progress(f"offline base: building a Debian {DEBIAN_SUITE} root filesystem with {', '.join(PACKAGES)}")
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=MMDEBSTRAP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        partial.unlink(missing_ok=True)
        raise UserError(
            f"mmdebstrap did not finish within {MMDEBSTRAP_TIMEOUT_S} s.",
            hint="check that the Debian mirror is reachable (set GYM_COMPOSE_DEBIAN_MIRROR to a closer one)",
        ) from None
    if completed.returncode != 0:
        partial.unlink(missing_ok=True)
        tail = "\n".join("    " + line for line in completed.stderr.strip().splitlines()[-15:])
        raise UserError(
            f"mmdebstrap could not build the offline base root filesystem:\n{tail}",
            hint="it needs root or unprivileged user namespaces, and a reachable Debian mirror "
            "(GYM_COMPOSE_DEBIAN_MIRROR)",
        )
    partial.rename(rootfs)
