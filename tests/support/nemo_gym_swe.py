"""NeMo Gym 0.7's own swebench_pro server on swebench_mini's task images (built here), offline.

Rows: the keys of that server's example rows (`resources_servers/swebench_pro/data/example.jsonl`),
each filled from a swebench_mini row (benchmarks/swebench_mini/data/swebench_mini.jsonl). Keys
swebench_mini has no value for (`evaluator_commit`, `dataset_revision`: provenance of the public
dataset) are empty; so is `image_digest`, so the image is `<image_repository>:<dockerhub_tag>`.
The stack: NeMo Gym's config with config keys changed only (`local_image_overrides`), gym-compose's
coding agent and the mock model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.support.e2e import docker_ps_all, free_port, gym_compose, labelled
from tests.support.nemo_gym_swe_rows import (
    deepswe_fields,
    denovo_swe_fields,
    swe_next_fields,
    swemer_oml_fields,
    task_tests,
)

REPO = Path(__file__).resolve().parents[2]
MINI_ROWS = REPO / "benchmarks" / "swebench_mini" / "data" / "swebench_mini.jsonl"
MINI_TASKS = REPO / "benchmarks" / "swebench_mini" / "tasks"
SERVER = "swebench_pro_resources_server"
KEY = f"++{SERVER}.resources_servers.swebench_pro"


def mini_rows() -> dict[str, dict[str, Any]]:
    """swebench_mini's rows by task name (their `dockerhub_tag`)."""
    rows = [json.loads(line) for line in MINI_ROWS.read_text().splitlines() if line.strip()]
    return {row["dockerhub_tag"]: row for row in rows}


def _scale_swe_fields(mini: dict[str, Any]) -> dict[str, Any]:
    """scale_swe's rows name their own image, working directory and checkout command, and carry the
    hidden tests as `f2p_patch`; its verifier runs pytest on the files of the test ids."""
    return {"image_url": f"swebench-mini:{mini['dockerhub_tag']}", "workdir": "/app", "language": "python",
            "pre_commands": f"git reset --hard {mini['base_commit']}", "f2p_patch": mini["test_patch"],
            "f2p_script": "", "FAIL_TO_PASS": mini["fail_to_pass"], "PASS_TO_PASS": mini["pass_to_pass"]}


def _swemer_fields(mini: dict[str, Any]) -> dict[str, Any]:
    """swemer_v1/v2's rows name their own image, working directory, test framework and test command."""
    files, fail_to_pass, pass_to_pass = task_tests(mini)
    return {"image_ref": f"swebench-mini:{mini['dockerhub_tag']}", "workdir": "/app", "language": "python",
            "test_framework": "pytest", "test_command": f"python -m pytest -rA {' '.join(files)}",
            "FAIL_TO_PASS": fail_to_pass, "PASS_TO_PASS": pass_to_pass}


SERVER_FIELDS = {"swebench_pro": lambda mini: {}, "scale_swe": _scale_swe_fields, "swemer_v1": _swemer_fields,
                 "swemer_v2": _swemer_fields, "swe_next": swe_next_fields, "swemer_oml": swemer_oml_fields,
                 "deepswe": deepswe_fields,
                 "denovo_swe": lambda mini: denovo_swe_fields(mini, MINI_TASKS / mini["dockerhub_tag"])}


def nemo_gym_row(nemo_gym: Path, task: str, server: str = "swebench_pro", **changes: Any) -> dict[str, Any]:
    """The swebench_mini task `task` as a row of NeMo Gym's `server` example file."""
    examples = nemo_gym / "resources_servers" / server / "data" / "example.jsonl"
    example = json.loads(examples.read_text().splitlines()[0])
    mini = mini_rows()[task]
    filled = {**mini, **SERVER_FIELDS[server](mini)}
    return {**{key: filled.get(key, "") for key in example}, **changes}


def local_image_overrides(*extra: str, instance: str = SERVER, implementation: str = "swebench_pro",
                          folder: Path = MINI_TASKS, evaluation_timeout: int | None = 300) -> list[str]:
    """Config only, NeMo Gym's code unchanged: task images built from swebench_mini's task folders
    (`swebench-mini:<task>`; or from `folder`'s) instead of a registry's, and sandbox limits this
    machine has (NeMo Gym's configs ask for 4 CPUs and 16-30 GiB each); for swebench_pro also its own
    code (gym-compose has a built-in of that name) and the repository its image names use.
    `evaluation_timeout`: None for a server without that key (deepswe: its tasks give theirs)."""
    key = f"++{instance}.resources_servers.{implementation}"
    own = [f"{key}.docker.runtime=nemo_gym", f"{key}.image_repository=swebench-mini"] \
        if implementation == "swebench_pro" else []
    return [*own,
            f"{key}.sandbox_config.task_images.folder={folder}",
            f"{key}.sandbox_config.task_images.repository=swebench-mini",
            f"{key}.sandbox_config.resources.cpu=1",
            f"{key}.sandbox_config.resources.memory_mib=1024",
            f"{key}.sandbox_config.network=none",
            *([f"{key}.evaluation_timeout={evaluation_timeout}"] if evaluation_timeout is not None else []),
            *extra]


def coding_agent(instance: str = SERVER) -> list[str]:
    """gym-compose's coding agent, in front of the resources server instance `instance`."""
    return ["--agent-type", "coding_agent",
            f"++coding_agent.responses_api_agents.coding_agent.resources_server.name={instance}",
            "++agent_name=coding_agent"]


AGENT = coding_agent()


def with_mock_mode(row: dict[str, Any], mode: str) -> dict[str, Any]:
    """The row, played by the mock model in `mode` (oracle, adversary, plain; docs/swe.md)."""
    return {**row, "responses_create_params": {**row["responses_create_params"], "metadata": {"gym_mock_mode": mode}}}


def with_mock_script(row: dict[str, Any], *turns: dict[str, Any]) -> dict[str, Any]:
    """The row, played by the mock model turn by turn: each turn `{"tool": NAME, "arguments": {...}}`."""
    metadata = {"gym_mock_script": json.dumps(list(turns)), "gym_mock_mode": "plain"}
    return {**row, "responses_create_params": {**row["responses_create_params"], "metadata": metadata}}


def task_folders_with_solved(into: Path, task: str) -> Path:
    """`into`, a task image folder: swebench_mini's task folder `task` as it is, and `<task>_solved`,
    its repository with the task's fix over it (image `swebench-mini:<task>_solved`)."""
    source = MINI_TASKS / task
    caches = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(source, into / task, ignore=caches)
    shutil.copytree(source / "repo", into / f"{task}_solved" / "repo", ignore=caches)
    shutil.copytree(source / "fix", into / f"{task}_solved" / "repo", ignore=caches, dirs_exist_ok=True)
    return into


def run_swebench_pro(nemo_gym: Path, project: str, tmp_path: Path, rows: list[dict[str, Any]],
                     *extra: str) -> tuple[list[dict[str, Any]], str]:
    """`up` NeMo Gym's swebench_pro with `rows` and gym-compose's coding agent."""
    rollouts, output = run_rows(nemo_gym, project, tmp_path, rows, "swebench_pro", *AGENT, *local_image_overrides(*extra))
    assert "server image gym-compose/swebench_pro-nemo-gym:" in output
    return rollouts, output


def run_rows(nemo_gym: Path, project: str, tmp_path: Path, rows: list[dict[str, Any]], selector: str,
             *arguments: str) -> tuple[list[dict[str, Any]], str]:
    """`up` a NeMo Gym server with `rows`; its rollouts and output, after checking that NeMo Gym's
    code ran on gym-compose's sandboxes and that nothing of the project is left."""
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    up = gym_compose("up", "-p", project, "--head-port", str(free_port()), "--search-dir", str(nemo_gym),
                     "--resources-server", selector, *arguments, "--input", str(path), cwd=tmp_path, timeout=2000)
    output = up.stdout + up.stderr
    assert up.returncode == 0, output[-5000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == len(rows), output[-3000:]
    left = {kind: labelled(kind, project) for kind in ("container", "network")}
    assert left == {"container": [], "network": []}, f"left after `up`: {left}\n{output[-3000:]}\n" + docker_ps_all()
    assert "(NeMo Gym runtime)" in output
    assert "sandbox provider 'sandbox'" in output and "runs as gym-compose sandboxes" in output
    return rollouts, output
