"""Sweep NeMo Gym 0.7's own resources servers through gym-compose with the built-in mock model.

    .venv/bin/python -m bench.bench_nemo_gym_servers                   # every server that needs no external service
    .venv/bin/python -m bench.bench_nemo_gym_servers --limit 20        # the first 20 of them (alphabetical)
    .venv/bin/python -m bench.bench_nemo_gym_servers --only wordle mcqa
    .venv/bin/python -m bench.bench_nemo_gym_servers --report FILE...  # reprint the table of earlier sweeps
    .venv/bin/python -m bench.bench_nemo_gym_servers --plan            # which would run, which not and why

The released nemo-gym 0.7.0 wheel (downloaded once, unpacked under ~/.cache/gym-compose) is the
`--search-dir`, as a user points gym-compose at a NeMo Gym checkout. For each resources server the
merged config (`gym-compose resolve`) decides whether it can run here at all: a server that needs
a judge model, an API key or endpoint, a sandbox provider, a GPU stack or the internet at build
time is excluded, with the reason. Every other one is started with its example rows
(`data/example.jsonl`) through `gym-compose up --input`, with the mock model as policy_model.
Each result is appended to a JSON-lines file as it finishes (a long sweep can be stopped and its
table still printed); the table: server, runtime, built, healthy, rollouts ok/failed, mean reward.
The mock model cannot solve tasks, so rewards say little; `ok` counts rollouts that completed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from bench._support.nemo_gym_sweep import (
    agent_override,
    exclusion,
    mock_model_flags,
    mocked_models,
    read_jsonl,
    run_bounded,
    selector,
    sweep_project,
    unleased_sandbox,
)
from bench._support.sweep_report import latest_results, print_columns, print_listed

REPO = Path(__file__).resolve().parents[1]
CLI = [str(REPO / ".venv" / "bin" / "gym-compose")]
NEMO_GYM_VERSION = "0.7.0"
RESULTS_LINE = re.compile(r"^results: (.+)$", re.MULTILINE)
FAILURES_PROGRESS = re.compile(r"\bfailures (\d+)\s*$", re.MULTILINE)  # up's progress line
RUN_MARKERS = ("rollouts.jsonl", "rollouts_failures.jsonl", "progress.json")


def nemo_gym_tree() -> Path:
    cache_home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    cache = cache_home / "gym-compose" / f"nemo-gym-{NEMO_GYM_VERSION}"
    tree = cache / "tree"
    if not (tree / "resources_servers").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--ignore-requires-python",
                        "--dest", str(cache), f"nemo-gym=={NEMO_GYM_VERSION}"], check=True, timeout=600)
        (wheel,) = cache.glob("nemo_gym-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(tree)
    return tree


def resolve(tree: Path, chosen: str, cwd: Path) -> tuple[dict[str, Any] | None, str, str]:
    done = subprocess.run([*CLI, "resolve", "--search-dir", str(tree), "--resources-server", chosen],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return None, "", last_line(done.stderr)
    config = yaml.safe_load(done.stdout)
    implementation = chosen.split("/")[0]
    # the instance (whatever its name) that runs this resources server's code
    names = [key for key, value in config.items() if isinstance(value, dict)
             and implementation in (value.get("resources_servers") or {})]
    runtime = ""
    for line in done.stderr.splitlines():
        instance, _, rest = line.strip().partition(": ")
        if instance in names[:1]:
            runtime = rest
    return config, runtime, ""


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.lower().startswith(("error", "gym-compose: error"))]
    return (errors or lines or ["?"])[-1][:200]


def run_server(tree: Path, server_dir: Path, index: int, timeout: float, logs: Path | None = None) -> dict[str, Any]:
    name = server_dir.name
    result: dict[str, Any] = {"server": name, "runtime": "-", "built": False, "healthy": False, "ok": 0,
                              "failed": 0, "mean_reward": None, "excluded": None, "error": None, "seconds": 0.0}
    chosen = selector(server_dir)
    rows = server_dir / "data" / "example.jsonl"
    if chosen is None or not rows.is_file():
        result["excluded"] = "no config or no data/example.jsonl"
        return result
    with tempfile.TemporaryDirectory(prefix=f"ngsweep-{name}-") as scratch:
        cwd = Path(scratch)
        config, runtime, error = resolve(tree, chosen, cwd)
        result["runtime"] = runtime.split(" ")[0] if runtime else "-"
        result["runtime_reason"] = runtime
        why = exclusion(server_dir, config, error)
        if why:
            result["excluded"] = why
            return result
        if config is None:
            result["error"] = f"resolve: {error}"
            return result
        extra = agent_override(config, rows)
        notes = [f"rows re-routed with {extra[0]}"] if extra else []
        mocked = mocked_models(config)
        extra += mock_model_flags(mocked)
        notes += [note] if (note := unleased_sandbox(server_dir)) else []
        notes += [f"{name} served by the built-in mock (--model {name}=mock; the config names {names})"
                  for name, names in mocked.items()]
        result["note"] = "; ".join(notes) or None
        project = sweep_project("ngsweep", index, name)
        started = time.monotonic()
        returncode = None
        try:
            returncode, output = run_bounded([*CLI, "up", "-p", project, "--search-dir", str(tree),
                                              "--resources-server", chosen, "--input", str(rows),
                                              "--head-port", str(12000 + index % 4000), *extra], cwd, timeout)
            if returncode is None:
                result["error"] = f"timed out after {timeout:.0f} s"
        finally:  # the whole project: the broker's sandboxes too, which `compose down` leaves
            subprocess.run([*CLI, "down", "-p", project], capture_output=True, timeout=300)
        result["seconds"] = round(time.monotonic() - started, 1)
        if logs:
            logs.mkdir(parents=True, exist_ok=True)
            (logs / f"{name}.log").write_text(output)
        read_outcome(result, cwd, output, returncode)
    return result


def read_outcome(result: dict[str, Any], cwd: Path, output: str, returncode: int | None) -> None:
    """Fill `result` from what `up` said and wrote: built, healthy, rollouts ok/failed, mean reward,
    the first failure (or the last error line) as its error."""
    result["built"] = "starting " in output
    result["healthy"] = bool(re.search(r"all \d+ services healthy", output))
    run_dir = run_folder(cwd, output)
    if run_dir is not None:
        # A run whose rollouts all failed has no rollouts.jsonl at all: count its failures
        # anyway (the sweep once reported such runs as 0 ok / 0 failed).
        rollouts = read_jsonl(run_dir / "rollouts.jsonl")
        failures = read_jsonl(run_dir / "rollouts_failures.jsonl")
        progress = FAILURES_PROGRESS.findall(output)
        result["ok"] = len(rollouts)
        # failures: gym-compose's own count (a rollout retried fails once), else the file's lines
        result["failed"] = int(progress[-1]) if progress else len(failures)
        rewards = [float(r["reward"]) for r in rollouts if isinstance(r.get("reward"), (int, float))]
        result["mean_reward"] = round(sum(rewards) / len(rewards), 3) if rewards else None
        if failures:
            first = failures[0]
            message = first.get("_ng_failure_message") or first.get("error") or first
            body = first.get("_ng_failure_response_body") or ""
            result["error"] = result["error"] or f"{message} {body}".strip()[:300]
    if not result["error"] and (returncode != 0 or run_dir is None):
        result["error"] = last_line(output)


def run_folder(cwd: Path, output: str) -> Path | None:
    """The run's folder: the one `up` names on its `results:` line, else the newest under cwd/results."""
    named = RESULTS_LINE.findall(output)
    if named:
        folder = Path(named[-1].strip())
        folder = folder if folder.is_absolute() else cwd / folder
        if folder.is_dir():
            return folder
    markers = [path for name in RUN_MARKERS for path in cwd.glob(f"results/**/{name}")]
    return max(markers, key=lambda path: path.stat().st_mtime).parent if markers else None


def print_table(results: list[dict[str, Any]]) -> None:
    ran = [r for r in results if not r["excluded"]]
    rows = [("SERVER", "RUNTIME", "BUILT", "HEALTHY", "OK", "FAILED", "MEAN REWARD", "SECONDS")]
    for r in ran:
        rows.append((r["server"], r["runtime"], "yes" if r["built"] else "no", "yes" if r["healthy"] else "no",
                     str(r["ok"]), str(r["failed"]), "-" if r["mean_reward"] is None else f"{r['mean_reward']:.3f}",
                     f"{r['seconds']:.0f}"))
    print_columns(rows)
    complete = [r for r in ran if r["ok"] and not r["failed"]]
    lean = sum(r["runtime"] == "lean" for r in ran)
    nemo_gym = sum(r["runtime"] == "nemo_gym" for r in ran)
    print(f"\n{len(ran)} servers run: {sum(r['built'] for r in ran)} built, {sum(r['healthy'] for r in ran)} healthy, "
          f"{len(complete)} with every example rollout ok; runtimes: {lean} lean, {nemo_gym} nemo_gym")
    print_listed("errors", ran, "server", "error")
    print_listed("notes", ran, "server", "note")
    print_listed("excluded", results, "server", "excluded", counted=True)

def print_plan(tree: Path, servers: list[Path]) -> int:
    """Each server's fate, decided as a sweep decides it before starting anything."""
    runs = 0
    for server in servers:
        with tempfile.TemporaryDirectory() as scratch:
            config, runtime, error = resolve(tree, selector(server) or server.name, Path(scratch))
        why = exclusion(server, config, error) or (f"does not resolve: {error}" if config is None else None)
        runs += why is None
        print(f"{server.name}: {'excluded: ' + why if why else 'runs (' + (runtime or '?') + ')'}", flush=True)
    print(f"\n{len(servers)} servers: {runs} would run, {len(servers) - runs} excluded")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nemo-gym", type=Path, help="an unpacked nemo-gym tree (default: the 0.7.0 wheel, cached)")
    parser.add_argument("--only", nargs="*", default=[], help="these resources servers only")
    parser.add_argument("--limit", type=int, default=0, help="the first N servers that are not excluded")
    parser.add_argument("--jobs", type=int, default=1, help="servers run at once")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds for one server's `up`")
    parser.add_argument("--results", type=Path, help="JSON-lines file the results are appended to")
    parser.add_argument("--logs", type=Path, help="folder to keep each server's `up` output in (<server>.log)")
    parser.add_argument("--report", type=Path, nargs="+",
                        help="print the table of earlier sweeps' results files and stop (a later file's result "
                             "for a server replaces an earlier one: a re-run batch over a full sweep)")
    parser.add_argument("--plan", action="store_true",
                        help="resolve each server's config and print whether it would run or why it is excluded; "
                             "start nothing")
    options = parser.parse_args()
    if options.report:
        print_table(latest_results(options.report, "server"))
        return 0
    os.environ.setdefault("GYM_COMPOSE_OFFLINE", "1")
    tree = (options.nemo_gym or nemo_gym_tree()).resolve()
    servers = sorted(p for p in (tree / "resources_servers").iterdir() if (p / "app.py").is_file())
    if options.only:
        servers = [p for p in servers if p.name in options.only]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results_file = options.results or Path(tempfile.gettempdir()) / f"nemo-gym-sweep-{stamp}.jsonl"
    print(f"sweeping {len(servers)} resources servers of {tree}; results appended to {results_file}", file=sys.stderr)
    if options.plan:
        return print_plan(tree, servers)
    results: list[dict[str, Any]] = []
    started = 0

    def one(item: tuple[int, Path]) -> dict[str, Any]:
        result = run_server(tree, item[1], item[0], options.timeout, options.logs)
        with results_file.open("a") as out:
            out.write(json.dumps(result) + "\n")
        state = result["excluded"] and f"excluded: {result['excluded']}" or \
            f"{result['runtime']} built={result['built']} healthy={result['healthy']} ok={result['ok']} " \
            f"failed={result['failed']} {result['error'] or ''}"
        print(f"  {result['server']}: {state}", file=sys.stderr, flush=True)
        return result

    # static exclusions first (cheap), then the runs, `--limit` of them
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        pending = []
        for index, server in enumerate(servers):
            if options.limit and started >= options.limit:
                break
            with tempfile.TemporaryDirectory() as scratch:
                config, _, error = resolve(tree, selector(server) or server.name, Path(scratch))
            if exclusion(server, config, error) or config is None:
                results.append(one((index, server)))
                continue
            started += 1
            pending.append(pool.submit(one, (index, server)))
        results += [future.result() for future in pending]
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
