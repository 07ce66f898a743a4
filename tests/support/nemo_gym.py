"""NeMo Gym 0.7.0 as released: its wheel from PyPI, unpacked once (cached under ~/.cache/gym-compose)
and used as a --search-dir, the way a user points gym-compose at a NeMo Gym checkout."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

NEMO_GYM_VERSION = "0.7.0"


def unpacked_nemo_gym() -> Path:
    """The released nemo-gym wheel from PyPI, unpacked once under the cache folder (under a lock, and
    renamed into place whole: test workers and other sessions may ask at the same time)."""
    cache = cache_root() / f"nemo-gym-{NEMO_GYM_VERSION}"
    unpacked = cache / "tree"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "tree.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (unpacked / "resources_servers").is_dir():
            if not list(cache.glob("nemo_gym-*.whl")):
                download = subprocess.run(
                    [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--ignore-requires-python",
                     "--dest", str(cache), f"nemo-gym=={NEMO_GYM_VERSION}"],
                    capture_output=True, text=True, timeout=300,
                )
                assert download.returncode == 0, (f"could not download nemo-gym {NEMO_GYM_VERSION} from PyPI:\n"
                                                  f"{download.stderr}")
            (wheel,) = cache.glob("nemo_gym-*.whl")
            partial = cache / "tree.partial"
            shutil.rmtree(partial, ignore_errors=True)
            shutil.rmtree(unpacked, ignore_errors=True)  # an older, incomplete unpack
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(partial)
            partial.rename(unpacked)
    return unpacked


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gym-compose"


def python_3_13() -> Path | None:
    """NeMo Gym 0.7 needs Python 3.13: GYM_COMPOSE_PYTHON313, else pyenv's 3.13.x, else python3.13 on PATH."""
    candidates = [os.environ.get("GYM_COMPOSE_PYTHON313", "")]
    candidates += sorted(str(p) for p in (Path.home() / ".pyenv" / "versions").glob("3.13*/bin/python3.13"))
    candidates.append(shutil.which("python3.13") or "")
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def nemo_gym_venv() -> Path:
    """A venv holding nemo-gym 0.7.0 from PyPI, under the cache folder (built once: a few minutes);
    skips the test when no Python 3.13 is there."""
    venv = cache_root() / f"nemo-gym-{NEMO_GYM_VERSION}-venv"
    complete = venv / ".complete"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session building the same venv: wait for it
        if not complete.exists():
            python = python_3_13()
            if python is None:
                pytest.skip("NeMo Gym 0.7 needs Python 3.13 (pyenv's 3.13.x, python3.13, or GYM_COMPOSE_PYTHON313)")
            shutil.rmtree(venv, ignore_errors=True)  # a half-built venv from an interrupted run
            subprocess.run([str(python), "-m", "venv", str(venv)], check=True, timeout=300)
            # nemo-gym 0.7.0 declares Requires-Python >=3.13.14; a 3.13.0 interpreter runs it
            install = subprocess.run(
                [str(venv / "bin" / "pip"), "install", "--quiet", "--ignore-requires-python",
                 f"nemo-gym=={NEMO_GYM_VERSION}"], capture_output=True, text=True, timeout=1200)
            assert install.returncode == 0, f"pip install nemo-gym=={NEMO_GYM_VERSION} failed:\n{install.stderr[-4000:]}"
            complete.touch()
    assert (venv / "bin" / "gym").is_file(), f"{venv} holds no gym command; delete it to rebuild"
    return venv
