"""gym-compose side by side with NeMo Gym 0.7: the same rows, the same mock model, runs interleaved.

    .venv/bin/python -m bench.bench_vs_nemo_gym [--rows 500] [--parallel 32] [--runs 5] [--starts 3]
                                                [--idle-seconds 20] [--cold]

NeMo Gym 0.7.0 comes from PyPI into a Python 3.13 venv under ~/.cache/gym-compose-bench (made on
the first run: `--python` names the interpreter, default pyenv's 3.13.0; NeMo Gym says it needs
3.13.14, so pip is told --ignore-requires-python and uv resolves its server venvs as 3.13.14).
Both run example_single_tool_call (resources server, simple agent, model server, head) on
NeMo Gym's own example rows repeated to --rows. NeMo Gym's model server is its openai_model,
aimed at gym-compose's deterministic mock model (mock_model, oracle mode) on loopback; gym-compose
serves that mock as its model server. Every rollout calls the tool once and answers.

Measured for each, the runs of one alternating with the other's:
- rollouts/s, the tool's own figure: NeMo Gym's progress bar, gym-compose's progress.json;
- CPU per rollout: whole machine (/proc/stat) over the `eval run` command, and attributed (the
  eval command's process tree, the servers: NeMo Gym's process tree or gym-compose's containers,
  the mock model, the containerd shims of the containers);
- the whole `eval run --no-serve` command's wall time, and when gym-compose's first rollout is
  written (NeMo Gym writes its rollouts at the end);
- warm start to all healthy (`gym env start` until "All N / N servers ready"; `gym-compose up -d`);
- idle CPU of the running stack, whole machine and attributed, over --idle-seconds;
- with --cold: cold start (NeMo Gym: no server venvs, an empty uv cache; gym-compose: a fresh
  image prefix, so no images, with an empty host cache and with the host caches kept).
The machine may be shared: whole-machine figures then hold other work, so compare the ratios of
one run, and the attributed figures. Prints one table with medians and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench._support.cli_runs import FirstRolloutWatch, cached_bytecode_env, repeated_rows
from bench._support.machine import (
    container_seconds,
    machine_busy_seconds,
    process_seconds,
    process_tree,
    shim_pids,
    stop_tree,
    tree_seconds,
)
from gym_compose.engine.targets.local_processes import LocalProcesses, with_local_addresses

REPO = Path(__file__).resolve().parents[1]

NEMO_GYM_VERSION = "0.7.0"
HOME = Path(os.environ.get("GYM_COMPOSE_BENCH_HOME", Path.home() / ".cache" / "gym-compose-bench"))
NG_DIR = HOME / "nemo_gym_0.7"
NG_VENV = NG_DIR / "venv"
DEFAULT_PYTHON = Path.home() / ".pyenv" / "versions" / "3.13.0" / "bin" / "python"
ROWS = REPO / "server_images" / "example_single_tool_call" / "data" / "example.jsonl"
AGENT = "example_single_tool_call_simple_agent"
PROJECT = "gym-compose-vs-nemo-gym"
HEAD_PORT = "11093"
CLI = [sys.executable, "-m", "gym_compose"]
SELECTOR = ["--resources-server", "example_single_tool_call"]
READY_LINE = re.compile(r"All (\d+) / \1 servers ready")
TQDM_RATE = re.compile(r"Collecting rollouts: 100%[^\r\n]*?([\d.]+)it/s")


# ---------------------------------------------------------------- the mock model both use

def start_mock(log_dir: Path) -> LocalProcesses:
    config = with_local_addresses({"mock_upstream": {"responses_api_models": {"mock_model": {
        "entrypoint": "app.py", "mode": "oracle"}}}})
    log_dir.mkdir(parents=True, exist_ok=True)
    mock = LocalProcesses(config, log_dir=log_dir)
    mock.start(timeout=180)
    return mock


# ---------------------------------------------------------------- NeMo Gym 0.7

def ensure_nemo_gym(python: Path) -> None:
    if (NG_VENV / "bin" / "gym").exists() and (NG_VENV / "bin" / "uv").exists():
        return
    print(f"installing nemo-gym {NEMO_GYM_VERSION} from PyPI into {NG_VENV} ...", flush=True)
    subprocess.run([str(python), "-m", "venv", str(NG_VENV)], check=True)
    subprocess.run([str(NG_VENV / "bin" / "pip"), "install", "-q", "--ignore-requires-python",
                    f"nemo-gym=={NEMO_GYM_VERSION}", "uv"], check=True)


def nemo_gym_env(python: Path, uv_cache: Path | None = None) -> dict[str, str]:
    uv_config = NG_DIR / "uv.toml"
    uv_config.write_text('[pip]\npython-version = "3.13.14"\n')  # NeMo Gym asks 3.13.14; 3.13.0 serves
    env = {**os.environ, "VIRTUAL_ENV": str(NG_VENV), "UV_CONFIG_FILE": str(uv_config),
           "PATH": f"{NG_VENV / 'bin'}:{os.environ['PATH']}:{python.parent}", "UV_PYTHON_DOWNLOADS": "never",
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    if uv_cache is not None:
        env["UV_CACHE_DIR"] = str(uv_cache)
    return env


@dataclass
class NemoGymStack:
    run_dir: Path
    env: dict[str, str]
    mock_url: str
    process: subprocess.Popen | None = None
    lines: list[tuple[float, str]] = field(default_factory=list)

    def start(self, timeout: float = 900) -> float:
        """`gym env start`; seconds until it says every server is ready."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.lines = []
        started = time.monotonic()
        self.process = subprocess.Popen(
            [str(NG_VENV / "bin" / "gym"), "env", "start", *SELECTOR, "--model-type", "openai_model",
             "--model", "mock", "--model-url", self.mock_url, "--model-api-key", "dummy"],
            cwd=self.run_dir, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        ready = threading.Event()

        def read() -> None:
            assert self.process is not None and self.process.stdout is not None
            for line in self.process.stdout:
                self.lines.append((time.monotonic() - started, line.rstrip()))
                if READY_LINE.search(line):
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        while not ready.wait(0.1):
            if self.process.poll() is not None or time.monotonic() - started > timeout:
                tail = "\n".join(line for _, line in self.lines[-20:])
                self.stop()
                sys.exit(f"NeMo Gym's `gym env start` did not get ready:\n{tail}")
        return time.monotonic() - started

    def pids(self) -> list[int]:
        return process_tree(self.process.pid) if self.process else []

    def eval_run(self, rows: Path, parallel: int, out: Path) -> tuple[float, float, int]:
        """(wall s, rollouts/s from its progress bar, rollouts written)."""
        started = time.monotonic()
        result = subprocess.run(
            [str(NG_VENV / "bin" / "gym"), "eval", "run", "--no-serve", "--agent", AGENT, "--input", str(rows),
             "--output", str(out), "--concurrency", str(parallel)],
            cwd=self.run_dir, env=self.env, capture_output=True, text=True, timeout=1800)
        wall = time.monotonic() - started
        if result.returncode != 0:
            sys.exit(f"NeMo Gym's `gym eval run` failed:\n{(result.stdout + result.stderr)[-3000:]}")
        rates = TQDM_RATE.findall(result.stdout + result.stderr)
        written = sum(1 for line in out.read_text().splitlines() if line.strip()) if out.exists() else 0
        return wall, float(rates[-1]) if rates else float("nan"), written

    def stop(self) -> None:
        if self.process is not None:
            left = stop_tree(self.pids())
            if left:
                print(f"  NeMo Gym processes left after SIGKILL: {left}")
            self.process = None


# ---------------------------------------------------------------- gym-compose

def gym_compose(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 1800) -> None:
    result = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                            env=cached_bytecode_env(env))
    if result.returncode != 0:
        sys.exit(f"`gym-compose {' '.join(args)}` failed:\n{result.stderr[-3000:]}")


def compose_containers() -> list[str]:
    out = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter", f"label=io.gym-compose.project={PROJECT}"],
                         capture_output=True, text=True, timeout=60).stdout
    return out.split()


class ComposeStack:
    def __init__(self, work: Path):
        self.work = work

    def start(self, env: dict[str, str] | None = None) -> float:
        started = time.monotonic()
        gym_compose("up", "-d", "-p", PROJECT, "--head-port", HEAD_PORT, *SELECTOR, cwd=self.work, env=env)
        return time.monotonic() - started

    def stop(self, env: dict[str, str] | None = None) -> None:
        subprocess.run([*CLI, "down", "-p", PROJECT], cwd=self.work, capture_output=True, timeout=600,
                       env=cached_bytecode_env(env))

    @staticmethod
    def eval_command(rows: Path, parallel: int, name: str) -> list[str]:
        return [*CLI, "eval", "run", "--no-serve", "-p", PROJECT, "--head-port", HEAD_PORT, *SELECTOR, "--input",
                str(rows), "--run-name", name, "--num-samples-in-parallel", str(parallel)]

    def eval_run(self, rows: Path, parallel: int, name: str) -> tuple[float, float, int, float | None, float]:
        """(wall s, rollouts/s from progress.json, rollouts written, first rollout written at s, collector CPU s)."""
        results = self.work / "results"
        collector = CollectorWatch(set(compose_containers()))
        started = time.monotonic()
        process = subprocess.Popen(self.eval_command(rows, parallel, name), cwd=self.work, env=cached_bytecode_env(),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = FirstRolloutWatch(results, f"{name}-*", started)
        while process.poll() is None:
            collector.sample()
            first.poll()
            time.sleep(0.02)
        wall = time.monotonic() - started
        stdout, stderr = process.communicate()
        if process.returncode != 0:
            sys.exit(f"`gym-compose eval run` failed:\n{(stdout + stderr)[-3000:]}")
        (run_dir,) = results.glob(f"{name}-*")
        rate = json.loads((run_dir / "progress.json").read_text())["rollouts_per_second"]
        written = sum(1 for line in (run_dir / "rollouts.jsonl").read_text().splitlines() if line.strip())
        return wall, rate, written, first.seconds, collector.seconds()


class CollectorWatch:
    """CPU of the one-off collector container, read from its cgroup while it runs (--rm removes it)."""

    def __init__(self, known: set[str]):
        self.known = known
        self.last: dict[str, float] = {}
        self._next_look = 0.0

    def sample(self) -> None:
        if time.monotonic() >= self._next_look:
            self._next_look = time.monotonic() + 0.5
            for cid in set(compose_containers()) - self.known:
                self.last.setdefault(cid, 0.0)
        for cid in self.last:
            used = container_seconds(cid)
            if used is not None:
                self.last[cid] = used

    def seconds(self) -> float:
        return sum(self.last.values())


# ---------------------------------------------------------------- measuring

def median(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def attributed(pids: list[int], containers: list[str], shims: list[int]) -> float:
    """CPU seconds so far of these processes, containers and containerd shims (with the runc and
    healthcheck processes they reaped; a check's own CPU is then counted in its container too)."""
    return (tree_seconds(pids) + sum(container_seconds(c) or 0.0 for c in containers)
            + sum(process_seconds(p) for p in shims))


def attributed_idle(pids: list[int], containers: list[str], seconds: float) -> tuple[float, float]:
    """(whole machine, attributed) CPU ms per second over `seconds` of an idle stack."""
    shims = shim_pids(containers)
    machine0, own0 = machine_busy_seconds(), attributed(pids, containers, shims)
    time.sleep(seconds)
    return (1000 * (machine_busy_seconds() - machine0) / seconds,
            1000 * (attributed(pids, containers, shims) - own0) / seconds)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Figures:
    rate: list[float] = field(default_factory=list)
    cpu_machine: list[float] = field(default_factory=list)
    cpu_attributed: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    warm: list[float] = field(default_factory=list)
    idle_machine: list[float] = field(default_factory=list)
    idle_attributed: list[float] = field(default_factory=list)
    cold: list[float] = field(default_factory=list)
    cold_cached: list[float] = field(default_factory=list)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--parallel", type=int, default=32)
    parser.add_argument("--runs", type=int, default=5, help="eval runs of each, interleaved")
    parser.add_argument("--starts", type=int, default=3, help="warm starts of each, interleaved")
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--cold", action="store_true", help="also time cold starts (minutes)")
    parser.add_argument("--python", type=Path, default=DEFAULT_PYTHON, help="Python 3.13 for NeMo Gym's venv")
    args = parser.parse_args()

    ensure_nemo_gym(args.python)
    work = Path(tempfile.mkdtemp(prefix="bench-vs-nemo-gym-"))
    rows = repeated_rows(ROWS, work / "rows.jsonl", args.rows)
    mock = start_mock(work / "mock-logs")
    mock_pids = [p.pid for p in mock.processes.values()]
    mock_url = f"http://127.0.0.1:{mock.port('mock_upstream')}/v1"
    ng_env = nemo_gym_env(args.python)
    nemo = NemoGymStack(NG_DIR / "run", ng_env, mock_url)
    compose = ComposeStack(work)
    ng, gc = Figures(), Figures()
    print(f"work folder {work}; NeMo Gym {NEMO_GYM_VERSION} in {NG_VENV}; mock model at {mock_url}", flush=True)
    print("building gym-compose's images (content-hashed: a no-op when present) ...", flush=True)
    gym_compose("build", "-p", PROJECT, *SELECTOR, cwd=work)
    try:
        if args.cold:
            cold_starts(args, work, nemo, ng, gc, mock_url)
        for attempt in range(args.starts):
            print(f"warm start {attempt + 1}/{args.starts} ...", flush=True)
            for first in ((nemo, compose) if attempt % 2 == 0 else (compose, nemo)):
                if first is nemo:
                    ng.warm.append(nemo.start())
                    nemo.stop()
                else:
                    gc.warm.append(compose.start())
                    compose.stop()
            print(f"  NeMo Gym {ng.warm[-1]:.2f} s, gym-compose {gc.warm[-1]:.2f} s", flush=True)

        print("starting both stacks for the eval runs ...", flush=True)
        nemo.start()
        compose.start()
        time.sleep(5)  # let start-up work settle
        containers = compose_containers()
        for attempt in range(args.runs):
            order = ("nemo", "compose") if attempt % 2 == 0 else ("compose", "nemo")
            for which in order:
                server_pids = nemo.pids() if which == "nemo" else []
                servers = [] if which == "nemo" else containers
                shims = shim_pids(servers)
                machine0, children0 = machine_busy_seconds(), children_cpu()
                own0 = attributed(server_pids + mock_pids, servers, shims)
                if which == "nemo":
                    wall, rate, written = nemo.eval_run(rows, args.parallel, work / f"nemo_gym_{attempt}.jsonl")
                    collector_s, figures = 0.0, ng
                else:
                    wall, rate, written, first, collector_s = compose.eval_run(rows, args.parallel, f"run{attempt}")
                    figures = gc
                    if first is not None:
                        figures.first.append(first)
                if written != args.rows:
                    sys.exit(f"{which}: {written} rollouts written, expected {args.rows}")
                own = (attributed(server_pids + mock_pids, servers, shims) - own0
                       + children_cpu() - children0 + collector_s)
                figures.rate.append(rate)
                figures.wall.append(wall)
                figures.cpu_machine.append(1000 * (machine_busy_seconds() - machine0) / args.rows)
                figures.cpu_attributed.append(1000 * own / args.rows)
            print(f"eval run {attempt + 1}/{args.runs}: NeMo Gym {ng.rate[-1]:.0f} rollouts/s, {ng.wall[-1]:.2f} s;"
                  f" gym-compose {gc.rate[-1]:.0f} rollouts/s, {gc.wall[-1]:.2f} s", flush=True)

        print(f"idle CPU, {args.idle_seconds:.0f} s each (the other stack stopped) ...", flush=True)
        compose.stop()
        ng_idle = attributed_idle(nemo.pids() + mock_pids, [], args.idle_seconds)
        nemo.stop()
        compose.start()
        time.sleep(5)
        gc_idle = attributed_idle([], compose_containers(), args.idle_seconds)
        ng.idle_machine.append(ng_idle[0])
        ng.idle_attributed.append(ng_idle[1])
        gc.idle_machine.append(gc_idle[0])
        gc.idle_attributed.append(gc_idle[1])
    finally:
        nemo.stop()
        compose.stop()
        mock.stop()
    print_table(args, ng, gc)
    return 0


def cold_starts(args, work: Path, nemo: NemoGymStack, ng: Figures, gc: Figures, mock_url: str) -> None:
    """NeMo Gym without its server venvs and uv cache; gym-compose under a fresh image prefix (no images),
    once with an empty host cache and once with the host caches kept."""
    print("cold start: NeMo Gym (no server venvs, empty uv cache) ...", flush=True)
    shutil.rmtree(nemo.run_dir, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="uv-cache-") as uv_cache:
        cold = NemoGymStack(nemo.run_dir, nemo_gym_env(args.python, Path(uv_cache)), mock_url)
        ng.cold.append(cold.start())
        cold.stop()
    for label, empty_cache, figures in (("images gone, host caches kept", False, gc.cold_cached),
                                        ("no images, empty caches", True, gc.cold)):
        print(f"cold start: gym-compose ({label}) ...", flush=True)
        prefix = f"gym-compose-bench-cold-{os.getpid()}"
        with tempfile.TemporaryDirectory(prefix="gc-cache-") as cache:
            env = {**os.environ, "GYM_COMPOSE_IMAGE_PREFIX": prefix}
            if empty_cache:
                env["GYM_COMPOSE_CACHE_DIR"] = cache
            stack = ComposeStack(work)
            try:
                figures.append(stack.start(env))
            finally:
                stack.stop(env)
                ids = subprocess.run(["docker", "image", "ls", "-aq", "--filter",
                                      f"label=io.gym-compose.image.prefix={prefix}"],
                                     capture_output=True, text=True, timeout=60).stdout.split()
                if ids:
                    subprocess.run(["docker", "image", "rm", "--force", *sorted(set(ids))], capture_output=True,
                                   timeout=600)
        print(f"  {figures[-1]:.1f} s", flush=True)


def print_table(args, ng: Figures, gc: Figures) -> None:
    def row(label: str, ng_value: float, gc_value: float, unit: str, lower_is_better: bool = True) -> str:
        def show(value: float) -> str:
            return "-" if value != value else f"{value:,.{1 if value < 100 else 0}f} {unit}"
        if ng_value != ng_value or gc_value != gc_value or not ng_value or not gc_value:
            ratio = ""
        else:
            better = ng_value / gc_value if lower_is_better else gc_value / ng_value
            ratio = f"{better:.1f}x {'better' if better >= 1 else 'worse'}"
        return f"| {label} | {show(ng_value)} | {show(gc_value)} | {ratio} |"

    nan = float("nan")
    print()
    print(f"{args.rows} rows of example_single_tool_call at {args.parallel} in parallel; medians of {args.runs} "
          f"eval runs and {args.starts} warm starts each, interleaved")
    print("| figure | NeMo Gym 0.7 | gym-compose | gym-compose vs NeMo Gym |")
    print("|---|---|---|---|")
    for line in (
        row("rollouts/s, the tool's own figure", median(ng.rate), median(gc.rate), "/s", lower_is_better=False),
        row("CPU per rollout, whole machine", median(ng.cpu_machine), median(gc.cpu_machine), "ms"),
        row("CPU per rollout, attributed to the stack and command", median(ng.cpu_attributed),
            median(gc.cpu_attributed), "ms"),
        row(f"whole `eval run --no-serve` command, {args.rows} rows", median(ng.wall), median(gc.wall), "s"),
        row("first rollout written after the command starts", nan, median(gc.first), "s"),
        row("warm start to all healthy", median(ng.warm), median(gc.warm), "s"),
        row("idle CPU of a running stack, whole machine", median(ng.idle_machine), median(gc.idle_machine), "ms/s"),
        row("idle CPU of a running stack, attributed", median(ng.idle_attributed), median(gc.idle_attributed),
            "ms/s"),
        row("cold start, no images, empty caches", median(ng.cold), median(gc.cold), "s"),
        row("cold start, images gone, host caches kept", nan, median(gc.cold_cached), "s"),
    ):
        print(line)
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs "
          "(whole-machine figures include other work on a shared machine)")


if __name__ == "__main__":
    sys.exit(main())
