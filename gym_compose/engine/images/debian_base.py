"""Offline parent images: Debian root filesystems made by mmdebstrap, imported.

`debian-python` (Python only) is the parent of the base image when the public Python image cannot
be pulled; `debian-build` (Python with its headers, g++, cmake, make) is the build stage of server images that
compile packages from source (docs/images.md). Each rootfs tarball is cached on the host, keyed by
the options that make it, so it is built once per machine.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from gym_compose.engine import docker_cli
from gym_compose.engine.images.build_lock import file_lock
from gym_compose.engine.images.image_build import inspect_image
from gym_compose.engine.images.image_hash import ContentHash
from gym_compose.engine.images.image_settings import DEBIAN_SUITE, IMAGE_LABEL, NEMO_GYM_PLATFORM, ImageSettings
from gym_compose.errors import UserError

MMDEBSTRAP_TIMEOUT_S = 900
IMPORT_TIMEOUT_S = 600
# The C++ runtime and OpenMP: manylinux wheels (numpy, pandas, scipy, pyarrow, torch, xllamacpp) link
# against the system's libstdc++ and many vendor no libgomp (on the public slim image, which has no
# libgomp1, docker/base-venv.sh installs it).
PYTHON_PACKAGES = ("python3", "python3-venv", "libstdc++6", "libgomp1")
# The images that run servers also have nft: a server that shares a network with its sandboxes
# closes that side with it before it starts (gym_compose/server/netguard.py). Build stages need none.
PACKAGES = (*PYTHON_PACKAGES, "nftables")
# The NeMo Gym runtime's parent: Debian trixie's Python 3.13, which nemo-gym 0.7 needs, plus the
# X11 client libraries common scientific wheels load without vendoring them (`readelf -d` of
# rdkit 2025.9, opencv-python-headless 5, matplotlib, pillow, scipy, pyarrow: rdkit's Draw module
# needs libXrender.so.1, libXext.so.6 and libX11.so.6; the rest is vendored or in the base).
NEMO_GYM_PACKAGES = (*PACKAGES, "libx11-6", "libxext6", "libxrender1")
# The build stage of native-requirements.txt: C/C++ toolchains and the Python headers a C extension
# includes (Python.h; a ctypes package such as llama-cpp-python needs none).
BUILD_PACKAGES = (*PYTHON_PACKAGES, "g++", "make", "cmake", "python3-dev")
# Builds the wheel of a C extension PyPI has only as an sdist (pycosat) for the image's Python:
# a compiler and the Python headers of the Debian release the image runs (wheelhouse.py).
WHEEL_BUILD_PACKAGES = (*PYTHON_PACKAGES, "gcc", "libc6-dev", "python3-dev")
# The parent of SWE task images (gym_compose/swe): a repository's tools, no gym-compose runtime.
SWE_PACKAGES = ("python3", "python-is-python3", "python3-pytest", "git", "patch", "ca-certificates")
# The forward proxy of sandboxes with an egress allow-list (docs/sandboxes.md): Debian's tinyproxy
# and nothing else (bash, essential, runs its healthcheck); its configuration comes at start.
EGRESS_PROXY_PACKAGES = ("tinyproxy",)
# Documentation, manual pages and translations are of no use in a server container. dpkg leaves
# them out of what it installs (a dpkg.cfg.d file written by a setup hook); the essential packages
# that mmdebstrap unpacks itself before dpkg runs are cleaned by a customize hook. Not given as
# --dpkgopt: mmdebstrap then pipes every essential package through its Python tar filter
# (mmtarfilter), which took 18.6 s of a 47.9 s build against 4.7 s for the plain unpack (load 5-9).
_EXCLUDED_PATHS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
)
_EXCLUDES_HOOK = ('mkdir -p "$1/etc/dpkg/dpkg.cfg.d" && printf "%s\\n" '
                  + " ".join(f"'{option}'" for option in _EXCLUDED_PATHS)
                  + ' > "$1/etc/dpkg/dpkg.cfg.d/90gym-compose-excludes"')
_CLEAN_HOOK = ('cd "$1/usr/share" && rm -rf man/* info/*'
               " && find doc -mindepth 1 ! -type d ! -name copyright -delete"
               " && find doc -mindepth 1 -type d -empty -delete"
               " && find locale -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +")
# mmdebstrap's hook that merges /usr the way debootstrap does, with a dummy usr-is-merged package:
# without it apt satisfies init-system-helpers' "usrmerge | usr-is-merged" with usrmerge, which
# pulls in perl (47 MB installed, 9 packages) only to convert a tree that is merged from the start.
_MERGED_USR_HOOKS = "share/mmdebstrap/hooks/maybe-merged-usr"


def image_changes(settings: ImageSettings, name: str = "debian-python") -> list[str]:
    """`docker import --change` lines. The labels are inherited by every image built on top,
    intermediate ones included, so that all of them can be found (and removed) by label."""
    return [
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        'CMD ["python3"]',
        f"LABEL {IMAGE_LABEL}={name} {IMAGE_LABEL}.prefix={settings.image_prefix}",
    ]


def mmdebstrap_command(settings: ImageSettings, output: Path, packages: tuple[str, ...] = PACKAGES,
                       suite: str = DEBIAN_SUITE) -> list[str]:
    """force-unsafe-io: dpkg skips its fsync per unpacked file (a root filesystem that is lost half
    made is made again); no recommends (none of them are needed) and no translations index."""
    command = ["mmdebstrap", "--variant=essential", "--include=" + ",".join(packages),
               '--aptopt=APT::Install-Recommends "false"', '--aptopt=Acquire::Languages "none"',
               "--dpkgopt=force-unsafe-io"]
    hooks = _merged_usr_hooks()
    if hooks is not None:
        command.append(f"--hook-dir={hooks}")
    command += [f"--setup-hook={_EXCLUDES_HOOK}", f"--customize-hook={_CLEAN_HOOK}"]
    command += [suite, str(output)]
    if settings.debian_mirror:
        command.append(settings.debian_mirror)
    return command


def _merged_usr_hooks() -> Path | None:
    """The merged-/usr hook folder of the installed mmdebstrap (next to its program), if it has one.
    With no mmdebstrap here nothing is built, but the key still names the hook, as a Debian install
    of mmdebstrap has it: a root filesystem or base built elsewhere and kept in the cache is found."""
    program = shutil.which("mmdebstrap")
    if program is None:
        return Path("/usr") / _MERGED_USR_HOOKS
    folder = Path(program).resolve().parent.parent / _MERGED_USR_HOOKS
    return folder if folder.is_dir() else None


def rootfs_key(settings: ImageSettings, packages: tuple[str, ...] = PACKAGES, suite: str = DEBIAN_SUITE) -> str:
    """Names the cached root filesystem: everything that decides its content (the hook folder by its
    name: where mmdebstrap is installed does not change what it makes)."""
    command = [f"--hook-dir={Path(arg.split('=', 1)[1]).name}" if arg.startswith("--hook-dir=") else arg
               for arg in mmdebstrap_command(settings, Path("rootfs.tar"), packages, suite)]
    return ContentHash().add_text("mmdebstrap", " ".join(command)).hexdigest()


def debian_python_tag(settings: ImageSettings) -> str:
    return _debian_tag(settings, "debian-python", PACKAGES)


def debian_build_tag(settings: ImageSettings) -> str:
    return _debian_tag(settings, "debian-build", BUILD_PACKAGES)


def nemo_gym_python_tag(settings: ImageSettings) -> str:
    return _debian_tag(settings, "debian-python313", NEMO_GYM_PACKAGES, NEMO_GYM_PLATFORM.suite)


def _debian_tag(settings: ImageSettings, name: str, packages: tuple[str, ...], suite: str = DEBIAN_SUITE) -> str:
    digest = (
        ContentHash()
        .add_text("rootfs", rootfs_key(settings, packages, suite))
        .add_text("changes", "\n".join(image_changes(settings, name)))
        .hexdigest()
    )
    return f"{settings.image_prefix}/{name}:{digest}"


def ensure_debian_python_image(settings: ImageSettings, progress: Callable[[str], None]) -> str:
    """Tag of a local image with Debian's Python 3 (built and imported when missing)."""
    return _ensure_debian_image(settings, progress, "debian-python", PACKAGES)


def ensure_debian_build_image(settings: ImageSettings, progress: Callable[[str], None]) -> str:
    """Tag of a local image with Debian's Python 3 and its headers, g++, make and cmake: the build
    stage that compiles packages from source with no registry and no network inside the build."""
    return _ensure_debian_image(settings, progress, "debian-build", BUILD_PACKAGES)


def ensure_debian_wheel_build_image(settings: ImageSettings, progress: Callable[[str], None],
                                    suite: str = DEBIAN_SUITE) -> str:
    """Tag of a local image with Debian's Python 3 of `suite`, gcc and the Python headers: where
    a C extension's sdist becomes a wheel for the offline images' Python (bookworm: 3.11 for the
    lean base, trixie: 3.13 for the NeMo Gym runtime)."""
    name = "debian-wheel-build" if suite == DEBIAN_SUITE else f"debian-wheel-build-{suite}"
    return _ensure_debian_image(settings, progress, name, WHEEL_BUILD_PACKAGES, suite)


def ensure_debian_swe_image(settings: ImageSettings, progress: Callable[[str], None]) -> str:
    """Tag of a local image with Debian's Python 3, pytest, git and patch: the parent of SWE task
    images built with no registry (docs/swe.md)."""
    return _ensure_debian_image(settings, progress, "debian-swe", SWE_PACKAGES)


def ensure_egress_proxy_image(settings: ImageSettings, progress: Callable[[str], None]) -> str:
    """Tag of a local image with Debian's tinyproxy: the egress proxy of allow-listed sandboxes."""
    return _ensure_debian_image(settings, progress, "egress-proxy", EGRESS_PROXY_PACKAGES)


def ensure_nemo_gym_python_image(settings: ImageSettings, progress: Callable[[str], None]) -> str:
    """Tag of a local image with Debian trixie's Python 3.13: the parent of the NeMo Gym runtime
    (docs/nemo-gym-runtime.md), which a registry-less machine cannot pull."""
    return _ensure_debian_image(settings, progress, "debian-python313", NEMO_GYM_PACKAGES, NEMO_GYM_PLATFORM.suite)


def _ensure_debian_image(settings: ImageSettings, progress: Callable[[str], None], name: str,
                         packages: tuple[str, ...], suite: str = DEBIAN_SUITE) -> str:
    tag = _debian_tag(settings, name, packages, suite)
    if inspect_image(tag) is not None:
        return tag
    with file_lock(settings.cache_dir / "locks" / f"{name}.lock"):
        if inspect_image(tag) is not None:
            return tag
        rootfs = settings.cache_dir / "rootfs" / f"{rootfs_key(settings, packages, suite)}.tar"
        if not rootfs.exists():
            _make_rootfs(settings, rootfs, progress, packages, suite)
        progress(f"offline {name}: importing {rootfs.name} as {tag}")
        started = time.monotonic()
        changes = [arg for change in image_changes(settings, name) for arg in ("--change", change)]
        docker_cli.run_docker(["import", *changes, str(rootfs), tag], timeout=IMPORT_TIMEOUT_S)
        progress(f"offline {name}: imported in {time.monotonic() - started:.1f} s")
    return tag


def _make_rootfs(settings: ImageSettings, rootfs: Path, progress: Callable[[str], None],
                 packages: tuple[str, ...] = PACKAGES, suite: str = DEBIAN_SUITE) -> None:
    if shutil.which("mmdebstrap") is None:
        raise UserError(
            "The base image cannot be pulled and mmdebstrap, which builds it offline, is not installed.",
            hint="install it (`sudo apt-get install mmdebstrap`, or run scripts/setup), or make a registry "
            "reachable, or point GYM_COMPOSE_BASE_IMAGE at a local Python 3.11 image",
        )
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    partial = rootfs.with_suffix(".partial.tar")
    command = mmdebstrap_command(settings, partial, packages, suite)
    progress(f"offline base: building a Debian {suite} root filesystem with {', '.join(packages)}")
    started = time.monotonic()
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
    size_mib = rootfs.stat().st_size >> 20
    progress(f"offline base: root filesystem built in {time.monotonic() - started:.1f} s ({size_mib} MiB)")
