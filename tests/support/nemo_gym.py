"""NeMo Gym 0.7.0 as released: its wheel from PyPI, unpacked once (cached under ~/.cache/gym-compose)
and used as a --search-dir, the way a user points gym-compose at a NeMo Gym checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

NEMO_GYM_VERSION = "0.7.0"


def unpacked_nemo_gym() -> Path:
    """The released nemo-gym wheel from PyPI, unpacked once under the cache folder."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gym-compose" / f"nemo-gym-{NEMO_GYM_VERSION}"
    unpacked = cache / "tree"
    if not (unpacked / "resources_servers").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        download = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--ignore-requires-python",
             "--dest", str(cache), f"nemo-gym=={NEMO_GYM_VERSION}"],
            capture_output=True, text=True, timeout=300,
        )
        assert download.returncode == 0, f"could not download nemo-gym {NEMO_GYM_VERSION} from PyPI:\n{download.stderr}"
        (wheel,) = cache.glob("nemo_gym-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacked)
    return unpacked
