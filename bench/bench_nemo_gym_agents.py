"""Sweep NeMo Gym 0.7's own agents through gym-compose with the built-in mock model.

    .venv/bin/python -m bench.bench_nemo_gym_agents                     # every agent
    .venv/bin/python -m bench.bench_nemo_gym_agents --only gymnasium_agent tau2
    .venv/bin/python -m bench.bench_nemo_gym_agents --plan              # the pairings and exclusions, nothing run
    .venv/bin/python -m bench.bench_nemo_gym_agents --report FILE...    # reprint the table of earlier sweeps

Each agent (`responses_api_agents/<name>` of the released nemo-gym 0.7.0 wheel) is paired with the
rows it is meant for: the first resources-server config of the wheel that instantiates it (e.g.
wordle.yaml's gymnasium agent with wordle's example rows), else its own config with
example_single_tool_call's rows and resources server (and the wheel's config of a model instance
its config names without defining it). Every row is routed to the agent
(`++agent_name`, NeMo Gym's way). The merged config (`gym-compose resolve`) decides whether the
pair can run here at all, as the server sweep does (bench/_support/nemo_gym_sweep.py: a key left
`???`, an API key, a second model with its own engine, a GPU stack, the internet at build time),
plus the agent's own requirements and start-up (Node.js and a CLI downloaded when it starts); a
pairing that is excluded gives way to the next one, except that an agent some server's config runs
is not tried on other rows once every such server is excluded (their reasons stand). Every
other pair is started with `gym-compose up --input ROWS --limit N`; each result is appended to a
JSON-lines file as it finishes. The table: agent, the pairing, runtime, built, healthy, rollouts
ok/failed, the first error.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench._support.nemo_gym_sweep import (
    exclusion,
    fetched_elsewhere,
    mock_model_flags,
    mocked_models,
    run_bounded,
    sweep_project,
)
from bench._support.sweep_report import latest_results, print_columns, print_listed
from bench.bench_nemo_gym_servers import CLI, last_line, nemo_gym_tree, read_outcome
from gym_compose.plan.requirements import server_requirements

# the resources server an agent with no server of its own is paired with: NeMo Gym's example,
# one tool, rows any tool-calling agent can answer
GENERIC_SERVER = "example_single_tool_call"
GPU_REQUIREMENT = re.compile(r"^\s*(torch|vllm|flash[-_]attn|nvidia-|cupy|tensorrt|jax\[cuda)",
                             re.IGNORECASE | re.MULTILINE)
NODE_DOWNLOAD = "https://nodejs.org/dist/"
INSTALL_SCRIPT = re.compile(r"https://\S+/install\.sh")
RUNS_ANOTHER_AGENTS_SET_UP = {  # read from its app.py (`scripts/{agent_key}_deps.sh` of the harness it wraps)
    "anyterminal_agent": "it runs the wrapped harness's deps script at start-up (claude_code_agent's "
                         "scripts/claude_code_agent_deps.sh: Node.js from nodejs.org, the CLI from npm)",
}
# Settings an agent's own config leaves `???` that have one sensible value for a sweep (the value
# NeMo Gym's docs use), so the agent is tried instead of excluded for them.
KNOWN_SETTINGS = {
    "langgraph_agent": ["entrypoint=reflection_agent.py"],
}


@dataclass(frozen=True)
class Pairing:
    """One way to run `agent`: the config selectors, the rows, and where the pairing comes from."""
    agent: str
    instance: str  # the agent's instance name in the merged config
    arguments: tuple[str, ...]
    rows: Path
    source: str  # the config file, relative to the tree

    @property
    def server(self) -> str:
        return self.arguments[self.arguments.index("--resources-server") + 1]

    @property
    def from_a_server_config(self) -> bool:
        """A resources server's config runs the agent: the rows are the ones it is made for."""
        return self.source.startswith("resources_servers/")


def agent_instances(config_file: Path, agent: str) -> list[str]:
    """The top-level instances of a config file that run `agent` (`responses_api_agents: {agent: ...}`)."""
    try:
        data = yaml.safe_load(config_file.read_text()) or {}
    except (yaml.YAMLError, OSError):
        return []
    if not isinstance(data, dict):
        return []
    return [key for key, value in data.items() if isinstance(value, dict)
            and isinstance(value.get("responses_api_agents"), dict) and agent in value["responses_api_agents"]]


def model_configs(tree: Path, config_file: Path) -> tuple[str, ...]:
    """`--config FILE` for each model instance (the policy aside) that the agent's own config names
    without defining it, where a model config of the wheel defines it (simple_agent_with_compaction's
    `policy_model_for_compaction`: responses_api_models/vllm_model_with_compaction/configs/)."""
    try:
        data = yaml.safe_load(config_file.read_text()) or {}
    except (yaml.YAMLError, OSError):
        return ()
    named = set(re.findall(r"type: responses_api_models\s+name: (\w+)", config_file.read_text())) - set(data)
    named.discard("policy_model")  # the stack's own (the mock)
    found: list[str] = []
    for model_config in sorted((tree / "responses_api_models").glob("*/configs/*.yaml")):
        try:
            defined = yaml.safe_load(model_config.read_text()) or {}
        except (yaml.YAMLError, OSError):
            continue
        if isinstance(defined, dict) and named & set(defined):
            found += ["--config", str(model_config)]
            named -= set(defined)
    return tuple(found)


def pairings(tree: Path, agent: str) -> list[Pairing]:
    """Every way to run `agent` here, best first: the resources-server configs that instantiate it
    (the server's own `<name>.yaml` before its flavors), then its own configs with the generic server
    (and the agent's own example rows, where it has them)."""
    found: list[Pairing] = []
    for server_dir in sorted(path for path in (tree / "resources_servers").iterdir() if path.is_dir()):
        rows = server_dir / "data" / "example.jsonl"
        configs = sorted((server_dir / "configs").glob("*.yaml"), key=lambda path: (path.stem != server_dir.name,
                                                                                    path.stem))
        if not rows.is_file():
            continue
        for config_file in configs:
            for instance in agent_instances(config_file, agent):
                chosen = server_dir.name if config_file.stem == server_dir.name \
                    else f"{server_dir.name}/{config_file.stem}"
                found.append(Pairing(agent, instance, ("--resources-server", chosen, f"++agent_name={instance}"),
                                     rows, str(config_file.relative_to(tree))))
    # the agent's own example rows where it ships them (mini_swe_agent_2's), else the generic server's
    own_rows = tree / "responses_api_agents" / agent / "data" / "example.jsonl"
    rows = own_rows if own_rows.is_file() else tree / "resources_servers" / GENERIC_SERVER / "data" / "example.jsonl"
    own = sorted((tree / "responses_api_agents" / agent / "configs").glob("*.yaml"),
                 key=lambda path: (path.stem != agent, path.stem))
    for config_file in own:
        for instance in agent_instances(config_file, agent):
            flavor = agent if config_file.stem == agent else f"{agent}/{config_file.stem}"
            block = f"++{instance}.responses_api_agents.{agent}"
            settings = [f"{block}.{setting}" for setting in KNOWN_SETTINGS.get(agent, [])]
            found.append(Pairing(agent, instance, (
                "--resources-server", GENERIC_SERVER, "--agent-type", flavor, f"++agent_name={instance}",
                f"{block}.resources_server.name={GENERIC_SERVER}", *settings, *model_configs(tree, config_file)),
                rows, str(config_file.relative_to(tree))))
    return found


def agent_exclusion(agent_dir: Path) -> str | None:
    """What the agent's own requirements or start-up need that this machine lacks (the pairing's
    config is checked apart)."""
    requirements = server_requirements(agent_dir)
    if GPU_REQUIREMENT.search(requirements):
        return "needs a GPU stack (torch/vllm/CUDA packages in its requirements)"
    return fetched_elsewhere(requirements) or downloads_at_start_up(agent_dir)


def downloads_at_start_up(agent_dir: Path) -> str | None:
    """The harness agents install Node.js and their CLI when they start (setup_<cli>.py), which an
    offline machine cannot: their servers stop during start-up with URLError."""
    if agent_dir.name in RUNS_ANOTHER_AGENTS_SET_UP:
        return f"needs the internet at run time: {RUNS_ANOTHER_AGENTS_SET_UP[agent_dir.name]}"
    for script in sorted(agent_dir.glob("*.py")):
        text = script.read_text(errors="replace")
        if NODE_DOWNLOAD in text:
            installer = INSTALL_SCRIPT.search(text)
            extra = f", and runs {installer.group(0)}" if installer else ""
            return (f"needs the internet at run time: it downloads Node.js from nodejs.org and installs its CLI "
                    f"with npm when it starts ({script.name}{extra})")
    return None


def resolve(tree: Path, pairing: Pairing, cwd: Path) -> tuple[dict[str, Any] | None, str, str]:
    """(merged config or None, the agent instance's runtime line, the error when it did not resolve)."""
    done = subprocess.run([*CLI, "resolve", "--search-dir", str(tree), *pairing.arguments],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return None, "", resolve_error(done.stderr)
    runtime = next((line.strip().partition(": ")[2] for line in done.stderr.splitlines()
                    if line.strip().startswith(f"{pairing.instance}: ")), "")
    return yaml.safe_load(done.stdout), runtime, ""


def resolve_error(stderr: str) -> str:
    """`resolve`'s error in one line; for values left `???`, the keys it lists on the lines below."""
    unset = re.findall(r"^\s*\+\+(\S+)=<value>", stderr, re.MULTILINE)
    if unset:
        return f"leaves {', '.join(unset)} open (`???`: a value to supply)"
    return last_line(stderr)


def plan(tree: Path, agent_dir: Path) -> tuple[Pairing | None, str | None, list[str]]:
    """(the pairing to run or None, why the agent cannot run when None, why each pairing before it did not)."""
    own = agent_exclusion(agent_dir)
    if own:
        return None, own, []
    skipped: list[str] = []
    made_for_it_excluded = False
    with tempfile.TemporaryDirectory() as scratch:
        for pairing in pairings(tree, agent_dir.name):
            if made_for_it_excluded and not pairing.from_a_server_config:
                # every server whose config runs this agent is excluded: another server's rows, in a
                # shape the agent does not take, would prove nothing (aviary_agent's 422s)
                break
            server_dir = tree / "resources_servers" / pairing.server.split("/")[0]
            config, _, error = resolve(tree, pairing, Path(scratch))
            why = exclusion(server_dir, config, error) or (f"does not resolve: {error}" if config is None else None)
            if why is None:
                return pairing, None, skipped
            skipped.append(f"{pairing.source}: {why}")
            made_for_it_excluded = pairing.from_a_server_config
    if not skipped:
        return None, "no config of the wheel instantiates it (no pairing with rows)", []
    return None, "; ".join(skipped), skipped


def run_agent(tree: Path, agent_dir: Path, index: int, timeout: float, limit: int,
              logs: Path | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"agent": agent_dir.name, "pairing": "-", "runtime": "-", "built": False,
                              "healthy": False, "ok": 0, "failed": 0, "mean_reward": None, "excluded": None,
                              "error": None, "seconds": 0.0, "skipped": []}
    pairing, why, skipped = plan(tree, agent_dir)
    result["skipped"] = skipped
    if pairing is None:
        result["excluded"] = why
        return result
    result["pairing"] = pairing.source
    with tempfile.TemporaryDirectory(prefix=f"ngagents-{agent_dir.name}-") as scratch:
        cwd = Path(scratch)
        config, runtime, _ = resolve(tree, pairing, cwd)
        result["runtime"] = runtime.split(" ")[0] if runtime else "-"
        mocked = mock_model_flags(mocked_models(config)) if config else []  # a hosted judge, a local vLLM: the mock serves it
        project = sweep_project("ngagents", index, agent_dir.name)
        started = time.monotonic()
        returncode, output = None, ""
        try:
            returncode, output = run_bounded([*CLI, "up", "-p", project, "--search-dir", str(tree), *pairing.arguments,
                                              "--input", str(pairing.rows), "--limit", str(limit),
                                              "--head-port", str(13000 + index % 4000), *mocked], cwd, timeout)
            if returncode is None:
                result["error"] = f"timed out after {timeout:.0f} s"
        finally:  # the whole project: the broker's sandboxes too
            subprocess.run([*CLI, "down", "-p", project], capture_output=True, timeout=300)
        result["seconds"] = round(time.monotonic() - started, 1)
        if logs:
            logs.mkdir(parents=True, exist_ok=True)
            (logs / f"{agent_dir.name}.log").write_text(output)
        read_outcome(result, cwd, output, returncode)
        result["error"] = start_up_cause(output) or result["error"]
    return result


EXCEPTION_LINE = re.compile(r"^\s*([\w.]*(Error|Exception|Exit)\b.*)$")


def start_up_cause(output: str) -> str | None:
    """For a server that stopped during start-up: `up`'s line naming it and the exception its log
    ends on (or the first log line that is not a traceback's), instead of the bare first line."""
    lines = output.splitlines()
    start = next((index for index, line in enumerate(lines) if "stopped during start-up" in line), None)
    if start is None:
        return None
    tail = [line.strip() for line in lines[start + 1:] if line.strip()]
    raised = [match.group(1) for line in tail if (match := EXCEPTION_LINE.match(line))]
    plain = [line for line in tail[1:] if not line.startswith(("File ", "Traceback", "~", "^", "-"))]
    cause = raised[-1] if raised else (plain[0] if plain else "")
    return f"{lines[start].strip()} {cause}".strip()[:300]


def print_table(results: list[dict[str, Any]]) -> None:
    ran = [r for r in results if not r["excluded"]]
    rows = [("AGENT", "PAIRED WITH", "RUNTIME", "BUILT", "HEALTHY", "OK", "FAILED", "SECONDS")]
    for r in ran:
        rows.append((r["agent"], r["pairing"], r["runtime"], "yes" if r["built"] else "no",
                     "yes" if r["healthy"] else "no", str(r["ok"]), str(r["failed"]), f"{r['seconds']:.0f}"))
    print_columns(rows)
    complete = [r for r in ran if r["ok"] and not r["failed"]]
    print(f"\n{len(ran)} agents run: {sum(r['built'] for r in ran)} built, {sum(r['healthy'] for r in ran)} healthy, "
          f"{len(complete)} with every rollout ok")
    print_listed("errors", ran, "agent", "error")
    print_listed("excluded", results, "agent", "excluded", counted=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nemo-gym", type=Path, help="an unpacked nemo-gym tree (default: the 0.7.0 wheel, cached)")
    parser.add_argument("--only", nargs="*", default=[], help="these agents only")
    parser.add_argument("--limit", type=int, default=3, help="rows per agent (the first N of its pairing's rows)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for one agent's `up`, its build included")
    parser.add_argument("--plan", action="store_true", help="print each agent's pairing or exclusion; run nothing")
    parser.add_argument("--results", type=Path, help="JSON-lines file the results are appended to")
    parser.add_argument("--logs", type=Path, help="folder to keep each agent's `up` output in (<agent>.log)")
    parser.add_argument("--report", type=Path, nargs="+", help="print the table of earlier sweeps' results and stop")
    options = parser.parse_args()
    if options.report:
        results = latest_results(options.report, "agent")
        for result in results if options.logs else []:  # causes read again from the kept logs
            log = options.logs / f"{result['agent']}.log"
            if log.is_file():
                result["error"] = start_up_cause(log.read_text()) or result["error"]
        print_table(results)
        return 0
    os.environ.setdefault("GYM_COMPOSE_OFFLINE", "1")
    tree = (options.nemo_gym or nemo_gym_tree()).resolve()
    agents = sorted(path for path in (tree / "responses_api_agents").iterdir() if (path / "app.py").is_file())
    if options.only:
        agents = [path for path in agents if path.name in options.only]
    if options.plan:
        for agent_dir in agents:
            pairing, why, skipped = plan(tree, agent_dir)
            said = f"{pairing.source} ({' '.join(pairing.arguments)})" if pairing else f"excluded: {why}"
            print(f"{agent_dir.name}: {said}" + "".join(f"\n    skipped {line}" for line in skipped if pairing))
        return 0
    results_file = options.results or Path(tempfile.gettempdir()) / f"nemo-gym-agents-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    print(f"sweeping {len(agents)} agents of {tree}; results appended to {results_file}", file=sys.stderr)
    results = []
    for index, agent_dir in enumerate(agents):
        result = run_agent(tree, agent_dir, index, options.timeout, options.limit, options.logs)
        with results_file.open("a") as out:
            out.write(json.dumps(result) + "\n")
        state = f"excluded: {result['excluded']}" if result["excluded"] else \
            f"{result['pairing']} built={result['built']} ok={result['ok']} failed={result['failed']} " \
            f"{result['error'] or ''}"
        print(f"  {result['agent']}: {state}", file=sys.stderr, flush=True)
        results.append(result)
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
