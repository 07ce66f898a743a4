"""Benchmark image builds: cold (from nothing, offline) and warm (no-op), and image sizes.

    .venv/bin/python -m bench.bench_build --cold       # removes gym-compose images and the host cache first
    .venv/bin/python -m bench.bench_build --isolated   # cold, under a fresh image prefix and cache dir,
                                                       # leaving other images alone (shared engines)
    .venv/bin/python -m bench.bench_build              # whatever is there already

Builds the base and one image per server implementation under server_images/ that has its own
code (app.py), plus a tiny synthetic server, then prints each server image's size above the base.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from gym_compose.engine import docker_cli
from gym_compose.engine.images.image_settings import IMAGE_LABEL, ImageSettings  # noqa: E402
from gym_compose.engine.images.lean_images import PROJECT_ROOT, ensure_base_image, ensure_server_image, image_size
from gym_compose.errors import UserError  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold", action="store_true", help="remove gym-compose images and the host cache first")
    parser.add_argument("--isolated", action="store_true", help="cold build under a fresh image prefix and cache dir")
    parser.add_argument("--no-pip-cache", action="store_true", help="also bypass pip's own download cache")
    parser.add_argument("--online", action="store_true", help="do not force GYM_COMPOSE_OFFLINE=1")
    parser.add_argument("--quiet", action="store_true", help="hide build progress")
    options = parser.parse_args()
    if not options.online:
        os.environ["GYM_COMPOSE_OFFLINE"] = "1"
    if options.no_pip_cache:
        os.environ["PIP_NO_CACHE_DIR"] = "1"
    started = time.monotonic()
    progress = (lambda line: None) if options.quiet else (lambda line: print(f"{time.monotonic() - started:6.1f}s {line}"))

    with tempfile.TemporaryDirectory() as scratch:
        if options.isolated:
            os.environ["GYM_COMPOSE_IMAGE_PREFIX"] = f"gym-compose-bench-{os.getpid()}"
            os.environ["GYM_COMPOSE_CACHE_DIR"] = str(Path(scratch) / "cache")
        cold = options.cold or options.isolated
        if options.cold and not remove_images(f"label={IMAGE_LABEL}"):
            cold = False
        if options.cold:
            remove_cache()
        folders = implementation_folders(Path(scratch))
        try:
            first_s, base, servers = timed_build(folders, progress)
            warm_s, _, _ = timed_build(folders, progress=lambda line: None)
            label = "cold build (from nothing)" if cold else "first build (with what was there)"
            print(f"\n{label}: {first_s:.1f} s   warm no-op: {warm_s:.2f} s   base: {base} {mb(image_size(base))}")
            for tag in servers:
                print(f"  {tag:<60} {kb(image_size(tag) - image_size(base))} above the base")
        finally:
            if options.isolated:
                prefix = os.environ["GYM_COMPOSE_IMAGE_PREFIX"]
                remove_images(f"label={IMAGE_LABEL}.prefix={prefix}")
    return 0


def timed_build(folders: list[Path], progress) -> tuple[float, str, list[str]]:
    started = time.monotonic()
    base = ensure_base_image(progress=progress)
    servers = [ensure_server_image(folder, base, progress=progress) for folder in folders]
    return time.monotonic() - started, base, servers


def implementation_folders(scratch: Path) -> list[Path]:
    tiny = scratch / "bench_tiny_server"
    (tiny / "data").mkdir(parents=True)
    (tiny / "app.py").write_text("ANSWER = 42\n")
    (tiny / "data" / "rows.jsonl").write_text('{"q": 1}\n')
    own = sorted(path.parent for path in (PROJECT_ROOT / "server_images").glob("*/app.py"))
    return own + [tiny]


def remove_images(label_filter: str) -> bool:
    """Removes the images matching the filter (intermediate ones inherit the labels); False when
    some are left (in use by a container)."""
    for _ in range(5):
        listed = docker_cli.run_docker(["image", "ls", "--all", "--quiet", "--filter", label_filter], timeout=60, retries=2)
        ids = sorted(set(listed.stdout.split()))
        if not ids:
            return True
        removed = docker_cli.run_docker(["image", "rm", "--force", *ids], timeout=300, check=False)
    print(f"could not remove every image ({label_filter}); the build below is not cold:")
    print(removed.stderr.strip()[-800:])
    return False


def remove_cache() -> None:
    cache = ImageSettings.from_env().cache_dir
    shutil.rmtree(cache, ignore_errors=True)
    print(f"removed gym-compose images and {cache}")


def mb(size: int) -> str:
    return f"{size / 1e6:.0f} MB"


def kb(size: int) -> str:
    if size >= 1e6:
        return f"{size / 1e6:.1f} MB"
    return f"{size / 1e3:.1f} kB" if size >= 1e3 else f"{size} B"


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
