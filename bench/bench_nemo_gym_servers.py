"""Sweep NeMo Gym 0.7's own resources servers through gym-compose with the built-in mock model.

    .venv/bin/python bench/bench_nemo_gym_servers.py                   # every server that needs no external service
    .venv/bin/python bench/bench_nemo_gym_servers.py --limit 20        # the first 20 of them (alphabetical)
    .venv/bin/python bench/bench_nemo_gym_servers.py --only wordle mcqa
    .venv/bin/python bench/bench_nemo_gym_servers.py --report FILE...  # reprint the table of earlier sweeps

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
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gym_compose.plan.requirements import server_requirements  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CLI = [str(REPO / ".venv" / "bin" / "gym-compose")]
NEMO_GYM_VERSION = "0.7.0"
EXTERNAL_KEY = re.compile(r"(api_key|base_url|endpoint|_url)$", re.IGNORECASE)
URL_REQUIREMENT = re.compile(r"(git\+|https?://|\s@\s)")  # after nemo-gym's own lines are dropped
GPU_REQUIREMENT = re.compile(r"^\s*(torch|vllm|flash[-_]attn|nvidia-|cupy|tensorrt|jax\[cuda)",
                             re.IGNORECASE | re.MULTILINE)
RESULTS_LINE = re.compile(r"^results: (.+)$", re.MULTILINE)
FAILURES_PROGRESS = re.compile(r"\bfailures (\d+)\s*$", re.MULTILINE)  # up's progress line
RUN_MARKERS = ("rollouts.jsonl", "rollouts_failures.jsonl", "progress.json")
# Servers that fetch what they need from the internet when they start (found by running them; the
# machine this runs on reaches PyPI and Debian only): excluded up front with the diagnosis.
FETCHES_AT_START_UP = {
    "bigcodebench": "internet at run time: builds a Python 3.10 venv with uv at start-up (bigcodebench, "
                    "tensorflow and its requirements-eval.txt from GitHub; setup_bcb_venv.py)",
    "bird_sql": "internet at run time: downloads the BIRD dev databases (bird-bench.oss-cn-beijing.aliyuncs.com) "
                "at start-up (setup_bird_sql.py)",
    "evalplus": "internet at run time: evalplus.data downloads the HumanEval+/MBPP+ release files "
                "(github.com/evalplus/<name>_release/releases) at start-up (its image builds, protobuf 5.29.6 "
                "and google-api-core 2.33.0 in the shadow layer)",
    "ether0": "internet at run time: git-clones github.com/Future-House/ether0 at import of app.py "
              "(setup_ether0.py; its image builds, Pillow==12.3.0 in the shadow layer)",
    "interactive_browser": "internet at build time: a Chromium build that `playwright install` downloads "
                           "(its default local backend drives one)",
    "newton_bench": "internet at run time: git-clones github.com/HKUST-KnowComp/NewtonBench at start-up "
                    "(setup_newton_bench.py)",
    "spider2_lite": "internet at run time: downloads the Spider 2.0-Lite SQLite databases from Google Drive "
                    "(drive.usercontent.google.com) at start-up (setup_spider2.py, from model_post_init)",
}
# Servers whose config class requires credentials of an outside service that their YAML leaves out.
NEEDS_CREDENTIALS = {
    "google_search": "an API key: Google Custom Search (google_api_key, google_cx are required fields)",
    "competitive_coding_challenges": "a NeMo Skills code-execution sandbox service (NEMO_SKILLS_SANDBOX_HOST, "
                                     "port 6000; waits 240 s for it at start-up)",
    "widesearch": "a harness container image (its harness agent requires `image`), like deepsearchqa",
    "deepsearchqa": "a harness container image and an Exa search key (its harness_exa_search agent requires "
                    "`agent`, `image`; exa_api_key)",
}
# Servers that need data files their package does not ship (a path to supply, null in their YAML).
NEEDS_DATA = {
    "scicode": "SciCode's test_data.h5 staged and test_data_fpath set (null in scicode.yaml; verify raises "
               "\"test_data_fpath is not configured\", so every rollout fails)",
    "wordle": "data/guesses.txt, which the package lacks: generate_data.py makes it from word lists it downloads "
              "from GitHub (ENABLE, SCOWL); /reset answers 500 FileNotFoundError without it",
}
# Servers whose own requirements pull a GPU stack transitively (the GPU_REQUIREMENT rule reads only
# their direct lines): found from `pip install --dry-run --report` of their requirements.
PULLS_GPU_STACK = {
    "rolemrc": "a GPU stack through bert-score (it requires torch; PyPI's Linux torch 2.15 pulls 17 nvidia CUDA "
               "wheels, several GB: the build outlasted 480 s) and the internet at run time for BERTScore's "
               "roberta-large checkpoint (include_bertscore: true)",
}
# Games whose /step answers HTTP 400 to a reply without their action tags: NeMo Gym's gymnasium_agent
# raises on it (raise_for_status) and the rollout fails there too, so the mock model's fixed sentence
# cannot complete a row; they need a model that plays.
NEEDS_A_PLAYER = {
    "grl_sokoban": "a model that plays: /step answers 400 (\"Unable to parse action\") to a reply with no "
                   "<action>Up|Down|Left|Right</action> tag or move word",
    "grl_tetris": "a model that plays: /step answers 400 without <action>Left|Right|Down</action> tags",
}


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


def selector(server_dir: Path) -> str | None:
    """The config a NeMo Gym user passes with the example rows: among `configs/<name>.yaml` and the
    other flavors (alphabetical), the first that defines every agent the rows' `agent_ref` names
    (format_verification's rows name `freeform_formatting_simple_agent`, which only
    `freeform_formatting.yaml` defines); when none does, `configs/<name>.yaml`, else the first flavor."""
    configs = server_dir / "configs"
    flavors = sorted(configs.glob("*.yaml")) if configs.is_dir() else []
    if not flavors:
        return None
    flavors.sort(key=lambda path: path.stem != server_dir.name)  # stable: <name>.yaml first
    named = row_agents(server_dir / "data" / "example.jsonl")
    chosen = next((path for path in flavors if named and named <= defined_agents(path)), flavors[0])
    return server_dir.name if chosen.stem == server_dir.name else f"{server_dir.name}/{chosen.stem}"


def row_agents(rows: Path) -> set[str]:
    """The agent names the rows' `agent_ref` entries give (NeMo Gym routes each row to it)."""
    named: set[str] = set()
    for row in read_jsonl(rows):
        reference = row.get("agent_ref") or {}
        if isinstance(reference, dict) and reference.get("name"):
            named.add(reference["name"])
    return named


def defined_agents(config_file: Path) -> set[str]:
    """Top-level instances of this config file that are agents (`responses_api_agents:`)."""
    try:
        data = yaml.safe_load(config_file.read_text()) or {}
    except yaml.YAMLError:
        return set()
    return {key for key, value in data.items() if isinstance(value, dict) and "responses_api_agents" in value} \
        if isinstance(data, dict) else set()


def walk(node: Any, path: str = ""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, f"{path}[{index}]")
    else:
        yield path, node


def exclusion(server_dir: Path, config: dict[str, Any] | None, resolve_error: str = "") -> str | None:
    """Why this server cannot run here (no external service reachable, no GPU), or None."""
    if config is None:
        lowered = resolve_error.lower()
        for word, why in (("judge", "needs a judge model"), ("genrm", "needs a judge model"),
                          ("api_key", "needs an API key"), ("base_url", "needs a real model endpoint"),
                          ("policy_base_url", "needs a real model endpoint")):
            if word in lowered:
                return f"{why} ({resolve_error[:120]})"
        unset = re.search(r"interpolation \$\{([^}]+)\} in (\S+) has no target", resolve_error)
        if unset:  # NeMo Gym stops on it too: a value (image, path, endpoint) the user must supply
            return f"leaves {unset.group(1)} unset (used by {unset.group(2)}): a value to supply"
        return None
    if server_dir.name in NEEDS_CREDENTIALS:
        return f"needs {NEEDS_CREDENTIALS[server_dir.name]}"
    if server_dir.name in FETCHES_AT_START_UP:
        return f"needs the {FETCHES_AT_START_UP[server_dir.name]}"
    if server_dir.name in NEEDS_DATA:
        return f"needs {NEEDS_DATA[server_dir.name]}"
    if server_dir.name in NEEDS_A_PLAYER:
        return f"needs {NEEDS_A_PLAYER[server_dir.name]}"
    if server_dir.name in PULLS_GPU_STACK:
        return f"needs {PULLS_GPU_STACK[server_dir.name]}"
    requirements = server_requirements(server_dir)
    extra_models = [key for key, value in config.items() if isinstance(value, dict)
                    and "responses_api_models" in value and key != "policy_model"]
    if extra_models:
        return f"needs a second model server ({', '.join(extra_models)}: a judge or user simulator)"
    for path, value in walk(config):
        if path.startswith("policy_"):
            continue
        if value == "???":
            return f"leaves {path} open (a key or endpoint to supply)"
        leaf = path.rsplit(".", 1)[-1]
        if "sandbox" in leaf.lower() and value not in (None, False, "", {}):
            return "needs a sandbox provider"
        if EXTERNAL_KEY.search(leaf) and isinstance(value, str) and value and "policy" not in path.split(".")[0] \
                and not path.startswith("policy_model"):
            return f"needs an external service ({path})"
    if GPU_REQUIREMENT.search(requirements):
        return "needs a GPU stack (torch/vllm/CUDA packages)"
    if URL_REQUIREMENT.search(requirements):
        return "needs the internet at build time (git/URL requirement)"
    fetched = uv_url_sources(server_dir)
    if fetched:
        return f"needs the internet at build time ({', '.join(fetched)} from git/URL in [tool.uv.sources])"
    return None


def uv_url_sources(server_dir: Path) -> list[str]:
    """Packages its pyproject.toml takes from git or a URL (NeMo Gym installs them with uv; the
    name on PyPI may be another package, e.g. code_fim's human-eval-infilling is an empty stub)."""
    pyproject = server_dir / "pyproject.toml"
    if not pyproject.is_file():
        return []
    try:
        sources = tomllib.loads(pyproject.read_text()).get("tool", {}).get("uv", {}).get("sources", {})
    except tomllib.TOMLDecodeError:
        return []
    return sorted(name for name, source in sources.items()
                  if isinstance(source, dict) and ("git" in source or "url" in source))


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


def agent_override(config: dict[str, Any], rows: Path) -> list[str]:
    """`++agent_name=<agent>` when the rows name an agent the config does not define and the config
    has exactly one: NeMo Gym's collector stops on such rows too, and its users pass +agent_name."""
    agents = [key for key, value in config.items() if isinstance(value, dict) and "responses_api_agents" in value]
    if len(agents) == 1 and row_agents(rows) - set(agents):
        return [f"++agent_name={agents[0]}"]
    return []


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
        result["note"] = f"rows re-routed with {extra[0]}" if extra else None
        project = f"ngsweep-{index}-{re.sub('[^a-z0-9]+', '-', name.lower())}"[:60].strip("-")
        started = time.monotonic()
        returncode = None
        try:
            returncode, output = run_bounded([*CLI, "up", "-p", project, "--search-dir", str(tree),
                                              "--resources-server", chosen, "--input", str(rows),
                                              "--head-port", str(12000 + index % 4000), *extra], cwd, timeout)
            if returncode is None:
                result["error"] = f"timed out after {timeout:.0f} s"
        finally:
            subprocess.run(["docker", "compose", "-p", project, "down", "-v", "--timeout", "1"],
                           capture_output=True, timeout=300)
        result["seconds"] = round(time.monotonic() - started, 1)
        if logs:
            logs.mkdir(parents=True, exist_ok=True)
            (logs / f"{name}.log").write_text(output)
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
    return result


def run_bounded(command: list[str], cwd: Path, timeout: float) -> tuple[int | None, str]:
    """(exit status, or None when it ran past `timeout`; stdout + stderr). The command runs in its own
    process group, all of which is stopped at the timeout: killing `up` alone left its `docker build`
    running on, orphaned, building what the next server's `up` then built a second time."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
        return process.returncode, output
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        return None, output


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


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def print_table(results: list[dict[str, Any]]) -> None:
    ran = [r for r in results if not r["excluded"]]
    rows = [("SERVER", "RUNTIME", "BUILT", "HEALTHY", "OK", "FAILED", "MEAN REWARD", "SECONDS")]
    for r in ran:
        rows.append((r["server"], r["runtime"], "yes" if r["built"] else "no", "yes" if r["healthy"] else "no",
                     str(r["ok"]), str(r["failed"]), "-" if r["mean_reward"] is None else f"{r['mean_reward']:.3f}",
                     f"{r['seconds']:.0f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    complete = [r for r in ran if r["ok"] and not r["failed"]]
    lean = sum(r["runtime"] == "lean" for r in ran)
    nemo_gym = sum(r["runtime"] == "nemo_gym" for r in ran)
    print(f"\n{len(ran)} servers run: {sum(r['built'] for r in ran)} built, {sum(r['healthy'] for r in ran)} healthy, "
          f"{len(complete)} with every example rollout ok; runtimes: {lean} lean, {nemo_gym} nemo_gym")
    problems = [r for r in ran if r["error"]]
    if problems:
        print("\nerrors:")
        for r in problems:
            print(f"  {r['server']}: {r['error']}")
    noted = [r for r in ran if r.get("note")]
    if noted:
        print("\nnotes:")
        for r in noted:
            print(f"  {r['server']}: {r['note']}")
    excluded = [r for r in results if r["excluded"]]
    if excluded:
        print(f"\nexcluded ({len(excluded)}):")
        for r in excluded:
            print(f"  {r['server']}: {r['excluded']}")


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
    options = parser.parse_args()
    if options.report:
        latest: dict[str, dict[str, Any]] = {}
        for report in options.report:
            for line in report.read_text().splitlines():
                if line.strip():
                    result = json.loads(line)
                    latest.pop(result["server"], None)
                    latest[result["server"]] = result
        print_table(sorted(latest.values(), key=lambda result: result["server"]))
        return 0
    os.environ.setdefault("GYM_COMPOSE_OFFLINE", "1")
    tree = (options.nemo_gym or nemo_gym_tree()).resolve()
    servers = sorted(p for p in (tree / "resources_servers").iterdir() if (p / "app.py").is_file())
    if options.only:
        servers = [p for p in servers if p.name in options.only]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results_file = options.results or Path(tempfile.gettempdir()) / f"nemo-gym-sweep-{stamp}.jsonl"
    print(f"sweeping {len(servers)} resources servers of {tree}; results appended to {results_file}", file=sys.stderr)
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
