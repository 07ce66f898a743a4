"""Where images and their host-side caches live, and the environment variables that change it."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

from gym_compose.contract import IMAGE_LABEL

__all__ = ["IMAGE_LABEL", "ImageSettings"]  # and the names below

DEFAULT_IMAGE_PREFIX = "gym-compose"
DEFAULT_PUBLIC_BASE = "python:3.11-slim"
PYTHON_VERSION = "3.11"
DEBIAN_SUITE = "bookworm"
# glibc of Debian bookworm; wheels for any manylinux up to this version run on the offline base.
DEBIAN_GLIBC = (2, 36)


@dataclass(frozen=True)
class PythonPlatform:
    """What wheels must fit: a CPython version on a Debian release (its glibc)."""

    python: str  # major.minor, as the image's interpreter reports it
    suite: str
    glibc: tuple[int, int]
    # pip's --python-version for downloads: a full version when a package's Requires-Python asks
    # for a newer micro release than Debian ships (nemo-gym 0.7 says >=3.13.14; trixie has 3.13.5)
    download_python: str = ""


# The lean runtime (gym_compose.server) and the NeMo Gym runtime (the real nemo-gym package,
# which needs Python 3.13: Debian trixie's).
LEAN_PLATFORM = PythonPlatform(PYTHON_VERSION, DEBIAN_SUITE, DEBIAN_GLIBC)
NEMO_GYM_PLATFORM = PythonPlatform("3.13", "trixie", (2, 41), download_python="3.13.14")

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class ImageSettings:
    cache_dir: Path
    image_prefix: str
    public_base: str
    offline: bool
    debian_mirror: str | None
    verbose: bool

    @classmethod
    def from_env(cls) -> "ImageSettings":
        env = os.environ
        cache_root = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return cls(
            cache_dir=Path(env.get("GYM_COMPOSE_CACHE_DIR") or cache_root / "gym-compose"),
            image_prefix=env.get("GYM_COMPOSE_IMAGE_PREFIX") or DEFAULT_IMAGE_PREFIX,
            public_base=env.get("GYM_COMPOSE_BASE_IMAGE") or DEFAULT_PUBLIC_BASE,
            offline=env.get("GYM_COMPOSE_OFFLINE", "").strip().lower() in _TRUE,
            debian_mirror=env.get("GYM_COMPOSE_DEBIAN_MIRROR") or None,
            verbose=env.get("GYM_COMPOSE_BUILD_VERBOSE", "").strip().lower() in _TRUE,
        )


def machine_arch() -> str:
    """The CPU architecture as wheel platform tags spell it (x86_64, aarch64)."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
