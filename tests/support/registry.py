"""A real registry on loopback for the end-to-end tests: Debian's `docker-registry` (the
distribution registry; scripts/setup installs it), served over plain HTTP (the engine trusts
127.0.0.0/8 that way), optionally behind basic auth (an htpasswd file, bcrypt)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from tests.support.e2e import free_port


@dataclass
class LoopbackRegistry:
    address: str  # 127.0.0.1:PORT
    process: subprocess.Popen
    credentials: Optional[tuple[str, str]] = None

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)

    def catalog(self) -> list[str]:
        request = urllib.request.Request(f"http://{self.address}/v2/_catalog")
        if self.credentials:
            token = base64.b64encode(":".join(self.credentials).encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())["repositories"]


def start_registry(folder: Path, address: Optional[str] = None,
                   credentials: Optional[tuple[str, str]] = None) -> LoopbackRegistry:
    """Serve a registry with its storage under `folder` (skips where docker-registry is missing)."""
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.skip("no docker-registry (Debian's package; scripts/setup installs it)")
    address = address or f"127.0.0.1:{free_port()}"
    folder.mkdir(parents=True, exist_ok=True)
    config = {"version": 0.1, "storage": {"filesystem": {"rootdirectory": str(folder / "blobs")}},
              "http": {"addr": address}}
    if credentials:
        with warnings.catch_warnings():  # crypt: bcrypt through the system's libxcrypt (gone in Python 3.13)
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt

            hashed = crypt.crypt(credentials[1], crypt.mksalt(crypt.METHOD_BLOWFISH))
        (folder / "htpasswd").write_text(f"{credentials[0]}:{hashed}\n")
        config["auth"] = {"htpasswd": {"realm": "gym-compose-test", "path": str(folder / "htpasswd")}}
    (folder / "registry.yml").write_text(json.dumps(config))
    process = subprocess.Popen([binary, "serve", str(folder / "registry.yml")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://{address}/v2/", timeout=2) as answer:
                if answer.status == 200:
                    return LoopbackRegistry(address, process, credentials)
        except urllib.error.HTTPError as error:
            if error.code == 401 and credentials:
                return LoopbackRegistry(address, process, credentials)
        except OSError:
            pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"docker-registry did not answer on {address}")


def docker_config_dir(folder: Path) -> Path:
    """An empty Docker CLI config (no logins) that still finds the CLI plugins (compose) of the
    user's own; pass it as DOCKER_CONFIG."""
    folder.mkdir(parents=True, exist_ok=True)
    plugins = Path.home() / ".docker" / "cli-plugins"
    if plugins.is_dir() and not (folder / "cli-plugins").exists():
        (folder / "cli-plugins").symlink_to(plugins)
    return folder
