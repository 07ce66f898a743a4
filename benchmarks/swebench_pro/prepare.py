"""Makes data/swebench_pro_benchmark.jsonl from the public SWE-bench Pro data set (internet needed).

    python benchmarks/swebench_pro/prepare.py [--limit N] [--no-digests]
    (or: gym-compose eval prepare --benchmark swebench_pro)

Per instance it pins the evaluator's own files into the row, from the SWE-bench_Pro-os repository
at a fixed commit: `run_script` (run_scripts/<id>/run_script.sh), `parser_script` (parser.py), and
both Dockerfiles (their ENV lines are exported before the tests run). So verification needs no
network but the image registry. `image_digest` pins each image (Docker Hub's digest of
`jefzda/sweap-images:<dockerhub_tag>`; --no-digests leaves it empty, then the tag is pulled).
The rows of the data set are read with the `datasets` package (pip install datasets), at a fixed
revision. Everything else in a row is the data set's, unchanged.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

HERE = Path(__file__).resolve().parent
DATASET = "ScaleAI/SWE-bench_Pro"
DATASET_REVISION = "7ab5114912baf22bb098818e604c02fe7ad2c11f"
EVALUATOR_COMMIT = "ca10a60a5fcae51e6948ffe1485d4153d421e6c5"
EVALUATOR_ARCHIVE = f"https://github.com/scaleapi/SWE-bench_Pro-os/archive/{EVALUATOR_COMMIT}.tar.gz"
DIGEST_URL = "https://hub.docker.com/v2/repositories/jefzda/sweap-images/tags/{tag}"
OUTPUT = HERE / "data" / "swebench_pro_benchmark.jsonl"
UPSTREAM = HERE / "data" / "upstream"
DIGESTS = HERE / "data" / "image_digests.json"
EXPECTED_ROWS = 731
HTTP_TIMEOUT_S = 60


def evaluator_tree(cache: Path = UPSTREAM) -> Path:
    """The evaluator repository at EVALUATOR_COMMIT, downloaded and unpacked once."""
    root = cache / f"SWE-bench_Pro-os-{EVALUATOR_COMMIT}"
    if root.is_dir():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"{EVALUATOR_COMMIT}.tar.gz"
    print(f"downloading the evaluator's scripts ({EVALUATOR_ARCHIVE})")
    with urllib.request.urlopen(EVALUATOR_ARCHIVE, timeout=HTTP_TIMEOUT_S) as response, open(archive, "wb") as out:
        while chunk := response.read(1 << 20):
            out.write(chunk)
    with tarfile.open(archive, "r:gz") as tar:
        try:
            tar.extractall(cache, filter="data")
        except TypeError:  # a Python without extraction filters (before 3.11.4)
            tar.extractall(cache)
    if not root.is_dir():
        raise SystemExit(f"error: the evaluator archive did not hold {root.name}/")
    return root


def asset(root: Path, relative: str) -> str:
    path = root / relative
    if not path.is_file():
        raise SystemExit(f"error: the evaluator has no {relative} (commit {EVALUATOR_COMMIT})")
    return path.read_text(encoding="utf-8")


def prompt(row: Mapping[str, Any], template: str) -> str:
    return template.format(problem_statement=str(row.get("problem_statement") or ""),
                           requirements=str(row.get("requirements") or ""),
                           interface=str(row.get("interface") or ""))


def enrich(row: Mapping[str, Any], root: Path, digest: str, template: str) -> dict[str, Any]:
    """One data set row with the evaluator's files pinned in and the prompt."""
    instance = str(row["instance_id"])
    return {
        **row,
        "run_script": asset(root, f"run_scripts/{instance}/run_script.sh"),
        "parser_script": asset(root, f"run_scripts/{instance}/parser.py"),
        "base_dockerfile": asset(root, f"dockerfiles/base_dockerfile/{instance}/Dockerfile"),
        "instance_dockerfile": asset(root, f"dockerfiles/instance_dockerfile/{instance}/Dockerfile"),
        "image_digest": digest,
        "subset": "pro",
        "split": "test",
        "evaluator_commit": EVALUATOR_COMMIT,
        "dataset_revision": DATASET_REVISION,
        "responses_create_params": {"input": [{"role": "user", "content": prompt(row, template)}]},
    }


def image_digest(tag: str, attempts: int = 6) -> str:
    url = DIGEST_URL.format(tag=urllib.parse.quote(tag, safe=""))
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
                digest = json.load(response).get("digest")
            break
        except urllib.error.HTTPError as error:
            if error.code != 429 or attempt == attempts - 1:
                raise
            wait = float(error.headers.get("Retry-After") or 2 ** attempt)
            print(f"Docker Hub asks to slow down; waiting {wait:g} s")
            time.sleep(wait)
    if not isinstance(digest, str) or not digest.startswith("sha256:"):
        raise SystemExit(f"error: Docker Hub gave no digest for jefzda/sweap-images:{tag}")
    return digest


def load_rows() -> Iterable[Mapping[str, Any]]:
    try:
        from datasets import load_dataset
    except ImportError:
        raise SystemExit("error: reading the data set needs the `datasets` package: "
                         ".venv/bin/pip install datasets") from None
    return load_dataset(DATASET, split="test", revision=DATASET_REVISION)


def prepare(rows: Iterable[Mapping[str, Any]], root: Path, output: Path, pin_digests: bool,
            limit: Optional[int] = None, digests_file: Path = DIGESTS) -> int:
    template = (HERE / "prompt.txt").read_text(encoding="utf-8")
    digests: dict[str, str] = json.loads(digests_file.read_text()) if digests_file.is_file() else {}
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_suffix(".partial")
    count = 0
    try:
        with open(partial, "w", encoding="utf-8") as out:
            for row in rows:
                if limit is not None and count >= limit:
                    break
                tag = str(row["dockerhub_tag"])
                if pin_digests and tag not in digests:
                    digests[tag] = image_digest(tag)
                    digests_file.write_text(json.dumps(digests, indent=1, sort_keys=True))
                out.write(json.dumps(enrich(row, root, digests.get(tag, "") if pin_digests else "", template)) + "\n")
                count += 1
        if count == 0:
            raise SystemExit("error: the data set gave no rows")
    except BaseException:
        partial.unlink(missing_ok=True)  # an earlier complete file stays as it was
        raise
    partial.replace(output)
    return count


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="only the first N instances")
    parser.add_argument("--no-digests", action="store_true", help="do not pin image digests (pull by tag)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    count = prepare(load_rows(), evaluator_tree(), args.output, not args.no_digests, args.limit)
    if args.limit is None and count != EXPECTED_ROWS:
        print(f"warning: {count} rows, expected {EXPECTED_ROWS} at revision {DATASET_REVISION}", file=sys.stderr)
    print(f"wrote {count} SWE-bench Pro rows to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
