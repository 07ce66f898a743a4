"""The NeMo Gym server sweep's decisions (bench/bench_nemo_gym_servers.py): which selector a server
folder is run with, which agent its rows need, why a server cannot run here (credentials, data, a
GPU stack, the internet at start-up), and a command run with a bound on its time."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml
from packaging.requirements import InvalidRequirement, Requirement

from gym_compose.contract import MAX_PROJECT, image_registry
from gym_compose.engine.images.wheelhouse import direct_references
from gym_compose.plan.planner import service_name
from gym_compose.plan.requirements import canonical_name, server_requirements

EXTERNAL_KEY = re.compile(r"(api_key|base_url|endpoint|_url)$", re.IGNORECASE)
# NeMo Gym's server metadata, not an endpoint the server calls (code_gen's wandb run of its `verified` check)
METADATA_KEYS = frozenset({"verified_url"})
# values that stand for "no key" (the built-in mock's policy_api_key, NeMo Gym's examples' EMPTY)
PLACEHOLDER_KEYS = frozenset({"", "empty", "dummy", "none", "sk-test"})
# What the package index holds under the name of each package NeMo Gym 0.7's servers and agents
# fetch from git or a URL (`pip download --no-deps NAME`, `pip index versions NAME`, 2026-12-06).
# Only verifiers is that code as released; the sweep names the line and this. The table:
# docs/nemo-gym-runtime.md#requirements-from-git-or-a-url.
ON_THE_INDEX = {
    "verifiers": "PyPI has verifiers 0.3.1, the release of this tag: `verifiers==0.3.1` installs the same code",
    "harbor": "PyPI's harbor releases are the same project, not this commit",
    "hermes-agent": "PyPI's hermes-agent releases are Nous Research's, not this commit",
    "mini-swe-agent": "PyPI's mini-swe-agent is the upstream project, this line NVIDIA's fork",
    "swegym": "not on PyPI",
    "nooa": "PyPI's nooa is another project",
    "simple-strands-agent": "not on PyPI",
    "tau2": "PyPI's tau2 is another project (magnetic relaxation rates)",
    "human-eval-infilling": "PyPI's human-eval-infilling 2.15.0 is an empty package of someone else's",
    "hypotest": "PyPI's hypotest 0.1.0 is another project (a hypothesis-testing helper)",
    "osworld": "PyPI's osworld 1.1 is an empty name placeholder",
    "en-core-web-sm": "spaCy publishes its models on GitHub only (PyPI has third parties' copies)",
    "verifiable-instructions": "not on PyPI",
    "openenv-echo-env": "not on PyPI (openenv-core is, its environments are not)",
    "openenv-coding-env": "not on PyPI (openenv-core is, its environments are not)",
    "openenv-maze-env": "not on PyPI (openenv-core is, its environments are not)",
    "nemo-usersim": "PyPI's nemo-usersim 0.0.0a0 is NVIDIA's empty name placeholder",
    "tale-suite": "PyPI has tale-suite 1.0.0rc2, the same project, where NeMo Gym pins the branch "
                  "train_test_splits; TALES then downloads its games at run time",
}
_EGG = re.compile(r"[#&]egg=([A-Za-z0-9._-]+)")
GPU_REQUIREMENT = re.compile(r"^\s*(torch|vllm|flash[-_]attn|nvidia-|cupy|tensorrt|jax\[cuda)",
                             re.IGNORECASE | re.MULTILINE)
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
# Sandboxed servers whose example rows cannot run here for a cause their config and rows do not show
# (found by reading their code); their sandboxes are not it (docs/nemo-gym-runtime.md, Sandboxes).
SANDBOX_CAUSES = {
    "swebench": "SWE-bench's own task images: the swebench 4.1.0 harness names them "
                "swebench/sweb.eval.x86_64.<instance_id>:latest on docker.io (app.py passes namespace=\"swebench\" to "
                "make_test_spec: no config key points it elsewhere), and its eval script needs their /testbed and "
                "conda env `testbed`, for the rows' repository (astropy); this offline machine cannot "
                "pull them, and swebench_mini's images (/app, no conda) do not fit its harness",
    "swe_rebench": "the internet at run time: its verify reads test logs with SWE-rebench's own parsers, which "
                   "log_parsers.py git-clones from github.com/SWE-rebench/SWE-rebench-V2 (branch main) unless "
                   "log_parser_cache_dir holds a clone; and its rows' "
                   "10 task images from docker.io (image_name: docker.io/swerebenchv2/intel-rohd:458-395921c, ...)",
    "math_formal_lean": "a NeMo Skills sandbox service with Lean 4 (sandbox_host:sandbox_port, NEMO_SKILLS_SANDBOX_HOST, "
                        "port 6000: an HTTP code-execution API, not a nemo_gym.sandbox provider)",
    "ns_tools": "nemo-skills-tools from git (github.com/NVIDIA-NeMo/Skills) and a NeMo Skills sandbox service "
                "(sandbox_host:sandbox_port, port 6000) for its Python tool, not a nemo_gym.sandbox provider",
    "terminal_bench_4": "the internet at run time: each row's task package (task_ref) is downloaded from Harbor's "
                        "registry (ofhuhcpkvzjlejydnvyd.supabase.co; task.py PackageLoader), and its task images "
                        "from Docker Hub",
    "vibench": "ViBench's base image app-bench-base:latest (build_image), built from its harness's "
               "_harness/runner/docker/Dockerfile.base, which the nemo-gym wheel does not ship, and the opencode CLI "
               "(opencode_version 1.17.11) installed in the sandbox at run time",
}
# Sandboxed servers shown to verify task images built here (swebench_mini's), offline, with NeMo Gym's own code.
RUNS_ON_LOCAL_IMAGES = {
    "swebench_pro": "tests/e2e/test_nemo_gym_swe_servers.py (swebench_mini's images; the gold patch 1.0, an empty "
                    "or another task's patch 0.0)",
    "scale_swe": "tests/e2e/test_nemo_gym_swe_servers.py (swebench_mini's images, its own golden-patch config; the "
                 "gold patch 1.0, an empty one 0.0)",
    "swemer_v1": "tests/e2e/test_nemo_gym_swe_servers.py (swebench_mini's images, its own golden-patch config; the "
                 "gold patch 1.0, an empty one 0.0)",
    "swemer_v2": "tests/e2e/test_nemo_gym_swe_servers.py (swebench_mini's images, its own golden-patch config; the "
                 "gold patch 1.0, an empty one 0.0)",
    "swe_next": "tests/e2e/test_nemo_gym_swe_servers.py (swebench_mini's images, its own golden-patch config, R2E's "
                ".venv and r2e_tests/ added by the rows' test_patch; the gold patch 1.0, an empty one 0.0)",
    "swemer_oml": "tests/e2e/test_nemo_gym_swe_servers.py (swebench_mini's images, its own golden-patch config, "
                  "the rows' test_sh, grade_py and config_json written here; the gold patch 1.0, an empty one 0.0)",
    "deepswe": "tests/e2e/test_nemo_gym_swe_servers.py (swebench_mini's images, its tasks written in DeepSWE's "
               "layout to the task store prepare.py fills, gym-compose's coding agent with the mock model: a "
               "committed fix 1.0, a wrong committed change or none 0.0)",
    "denovo_swe": "tests/e2e/test_nemo_gym_swe_servers.py (swebench_mini's images, its own golden-patch config, "
                  "which grades the image's own source: an image of the fixed repository 1.0, the task's own "
                  "image 0.0)",
}
# Servers that lease a sandbox only when the model calls one tool (found by reading their code): rows
# that never offer that tool run without the image their config names.
SANDBOX_ONLY_FOR_A_TOOL = {
    "litmus_agent": ("stateful_python_code_exec", "app.py creates the sandbox on the tool's first call"),
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
    "gdp_pdf": "its rows' source documents (data/test_media/documents/<id>/manifest.json and pages), which the "
               "package does not ship: NeMo Gym's `gym eval prepare --benchmark gdp_pdf` fetches and renders them "
               "(gdp_pdf_agent raises FileNotFoundError for each row without them)",
    "indian_banking": "data/db.json and data/kb.json from the Hugging Face dataset NPCI/nemo-gym-indian-banking, "
                      "which the package lacks (every rollout fails without them)",
    "wordle": "data/guesses.txt, which the package lacks: generate_data.py makes it from word lists it downloads "
              "from GitHub (ENABLE, SCOWL); /reset answers 500 FileNotFoundError without it",
}
# Servers that need a GPU in a way their direct requirement lines do not show (the GPU_REQUIREMENT
# rule reads only those): a GPU stack pulled transitively (`pip install --dry-run --report`), or a
# model engine of their own.
NEEDS_A_GPU = {
    "genrm_compare": "a GPU: its genrm_model is a local vLLM that NeMo Gym starts itself (genrm_model, "
                     "vllm_serve_kwargs data_parallel_size 2) on the checkpoint ${genrm_model_name} names",
    "rolemrc": "a GPU stack through bert-score (it requires torch; PyPI's Linux torch 2.15 pulls 17 nvidia CUDA "
               "wheels, several GB: the build outlasted 480 s) and the internet at run time for BERTScore's "
               "roberta-large checkpoint (include_bertscore: true)",
}


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


def mocked_models(config: dict[str, Any]) -> dict[str, str]:
    """Model instances besides the policy that the sweep serves with the built-in mock
    (`--model NAME=mock`, docs/models.md), with what the config names instead: a hosted endpoint (a
    judge at api.openai.com: unreachable offline) or a model server that is its own engine (a local
    vLLM: a GPU). An instance with no endpoint gets the mock without asking; one in front of the
    stack's own mock policy (vllm_model_for_compaction) runs as configured."""
    mock_policy = "mock_model" in ((config.get("policy_model") or {}).get("responses_api_models") or {})
    found = {}
    for name, value in config.items():
        if name == "policy_model" or not isinstance(value, dict) \
                or not isinstance(value.get("responses_api_models"), dict) or "mock_model" in value["responses_api_models"]:
            continue
        (implementation, block), = list(value["responses_api_models"].items())[:1]
        urls = [str(v) for key, v in (block or {}).items() if str(key).endswith("base_url") and v]
        if urls and mock_policy and all(url == config.get("policy_base_url") for url in urls):
            continue
        found[name] = f"{implementation} at {urls[0]}" if urls else f"{implementation}, its own engine"
    return found


def mock_model_flags(names: Iterable[str]) -> list[str]:
    """`--model NAME=mock` for each of `names` (mocked_models' keys)."""
    return [flag for name in names for flag in ("--model", f"{name}=mock")]


def rows_without_an_agent(server_dir: Path, config: dict[str, Any]) -> str | None:
    """Why the example rows cannot be routed: they name no agent and the server's configs define none
    (NeMo Gym pairs such a server with an agent in a benchmark config: gdpval with stirrup_agent)."""
    rows = server_dir / "data" / "example.jsonl"
    if any(isinstance(value, dict) and "responses_api_agents" in value for value in config.values()) \
            or not rows.is_file() or row_agents(rows) or not read_jsonl(rows):
        return None
    allowed = sorted({str(agent) for path, agent in walk(config) if re.search(r"\.allowed_agents\[\d+\]$", path)})
    pairing = f" (its allowed_agents: {', '.join(allowed)}; see the agent sweep)" if allowed else ""
    return (f"needs an agent: its rows name none (no agent_ref) and no config of the server defines one{pairing}; "
            "NeMo Gym pairs it with one in a benchmark config")


def exclusion(server_dir: Path, config: dict[str, Any] | None, resolve_error: str = "") -> str | None:
    """Why this server cannot run here (no external service reachable, no GPU), or None."""
    if server_dir.name in NEEDS_A_GPU:  # before a resolve error: genrm_compare's names its checkpoint
        return f"needs {NEEDS_A_GPU[server_dir.name]}"
    if config is None:  # what stops the config, and what its build would need besides
        causes = [cause for cause in (unresolved(resolve_error), fetched_elsewhere(server_requirements(server_dir)))
                  if cause]
        return "; and ".join(causes) or None
    if server_dir.name in NEEDS_CREDENTIALS:
        return f"needs {NEEDS_CREDENTIALS[server_dir.name]}"
    if server_dir.name in FETCHES_AT_START_UP:
        return f"needs the {FETCHES_AT_START_UP[server_dir.name]}"
    if server_dir.name in NEEDS_DATA:
        return f"needs {NEEDS_DATA[server_dir.name]}"
    requirements = server_requirements(server_dir)
    mocked = mocked_models(config)
    sandboxed = False
    own = stack_hosts(config)
    for path, value in walk(config):
        if path.startswith("policy_") or path.split(".", 1)[0] in mocked:  # the mock replaces those blocks
            continue
        if value == "???":
            return f"leaves {path} open (a key or endpoint to supply)"
        if ".sandbox_provider." in f".{path}.":  # an inline provider's own settings (litmus_agent's opensandbox
            sandboxed = True                     # api_key) are not used: gym-compose's sandboxes serve it
            continue
        leaf = path.rsplit(".", 1)[-1]
        if "sandbox" in leaf.lower() and value not in (None, False, "", {}):
            sandboxed = True
            continue
        # a top-level key (`judge_api_key: EMPTY`) is only what a block interpolates: the block says it
        if leaf in METADATA_KEYS or in_stack(value, own) or key_of_an_in_stack_endpoint(path, config, own) \
                or key_of_an_unset_endpoint(path, config):
            continue  # metadata; the mock's own address (policy_base_url with the built-in mock) and its key
        if EXTERNAL_KEY.search(leaf) and isinstance(value, str) and value.lower() not in PLACEHOLDER_KEYS \
                and "policy" not in path.split(".")[0] \
                and not path.startswith("policy_model") and "." in path:
            return f"needs an external service ({path})"
    if sandboxed and (cause := sandbox_reason(server_dir, config)):
        return cause
    if GPU_REQUIREMENT.search(requirements):
        return "needs a GPU stack (torch/vllm/CUDA packages)"
    return fetched_elsewhere(requirements) or rows_without_an_agent(server_dir, config)


def unresolved(resolve_error: str) -> str | None:
    """The cause named by the error that stopped a server's config from resolving, or None."""
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


def fetched_elsewhere(requirements: str) -> str | None:
    """The cause for requirements fetched from git or a URL: each one's package, where from, and
    what the package index holds under its name."""
    fetched = direct_references(requirements)
    if not fetched:
        return None
    described = []
    for line in fetched:
        name, source = fetched_package(line)
        index = ON_THE_INDEX.get(name, "not checked against the package index")
        described.append(f"{name} from {source[:100]} [{index}]")
    return "needs the internet at build time: " + "; ".join(described)


def fetched_package(line: str) -> tuple[str, str]:
    """(the package a git or URL requirement installs, where from): its name, `#egg=`, a wheel's
    file name, or the repository's."""
    try:
        named = Requirement(line)
    except InvalidRequirement:  # a bare URL (`git+https://...#egg=NAME`): no name of its own
        line = line.split(";")[0].strip()
    else:
        if named.url:
            return canonical_name(named.name), named.url
    return _package_of_url(line), line


def _package_of_url(line: str) -> str:
    if egg := _EGG.search(line):
        return canonical_name(egg.group(1))
    last = urlparse(line.split("+", 1)[-1]).path.rstrip("/").rsplit("/", 1)[-1]
    if last.endswith(".whl"):
        return canonical_name(last.split("-", 1)[0])
    return canonical_name(re.sub(r"(\.git|\.tar\.gz|\.zip)$", "", last))


def stack_hosts(config: dict[str, Any]) -> set[str]:
    """The host names of the stack's own services (`policy-model`)."""
    return {service_name(key) for key, block in config.items() if isinstance(block, dict)}


def in_stack(value: Any, hosts: set[str]) -> bool:
    """`value` is a URL of one of the stack's own services (`http://policy-model:8000/v1`)."""
    return isinstance(value, str) and value.startswith("http://") and urlparse(value).hostname in hosts


def _api_key_block(path: str, config: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    """For `a.b.judge_api_key`: the block `a.b` and the name of its endpoint key (`judge_base_url`);
    None when the path is no api key or names no block."""
    parent, _, leaf = path.rpartition(".")
    if not leaf.endswith("api_key"):
        return None
    node: Any = config
    for key in parent.split(".") if parent else []:
        node = node.get(key) if isinstance(node, dict) else None
    return (node, leaf[:-len("api_key")] + "base_url") if isinstance(node, dict) else None


def key_of_an_in_stack_endpoint(path: str, config: dict[str, Any], hosts: set[str]) -> bool:
    """`a.b.judge_api_key` (shown masked, so unknown) beside an `a.b.judge_base_url` of the stack's own."""
    found = _api_key_block(path, config)
    return found is not None and in_stack(found[0].get(found[1]), hosts)


def key_of_an_unset_endpoint(path: str, config: dict[str, Any]) -> bool:
    """`a.b.openai_api_key` beside `a.b.openai_base_url: null` in a block whose model calls go through
    its `model_server` (cline_agent, kilocode_agent): the key of a direct-provider mode not in use."""
    found = _api_key_block(path, config)
    if found is None:
        return False
    node, endpoint = found
    server = node.get("model_server")
    return endpoint in node and node[endpoint] is None and isinstance(server, dict) \
        and server.get("type") == "responses_api_models"


def sandbox_reason(server_dir: Path, config: dict[str, Any]) -> str | None:
    """Why a sandboxed server's example rows cannot run here. Its sandboxes are not the cause: whatever
    provider its config names, NeMo Gym's `nemo_gym.sandbox` gets gym-compose's (docs/nemo-gym-runtime.md,
    Sandboxes). What is: the task images its rows name, in a registry this offline machine cannot
    reach (which image, which registry), or a cause found by reading its code (`SANDBOX_CAUSES`);
    None when neither: it runs."""
    local = f"; on task images built here it runs: {RUNS_ON_LOCAL_IMAGES[server_dir.name]}" \
        if server_dir.name in RUNS_ON_LOCAL_IMAGES else ""
    if server_dir.name in SANDBOX_CAUSES:
        return f"needs {SANDBOX_CAUSES[server_dir.name]}{local}"
    rows = task_images(server_dir, {})
    if rows and all(value.endswith(".sif") for _, value in rows):
        return (f"needs {len(rows)} Apptainer/Singularity task images (.sif files, e.g. {rows[0][1]}), "
                "which no Docker sandbox runs")
    if rows:
        key, image = rows[0]
        if key == "image_digest":  # NeMo Gym's swebench_pro: <image_repository>@<digest>
            repository = next((value for key, value in task_images(server_dir, config, rows=False)
                               if key == "image_repository"), "")
            image = f"{repository}@{image}" if repository else image
        count = f"{len(rows)} task images" if len(rows) > 1 else "a task image"
        return (f"needs {count} from {image_registry(image)}, which this offline machine cannot reach (rows' {key}: "
                f"{image}" + (", ..." if len(rows) > 1 else "") + f"){local}")
    configured = task_images(server_dir, config, rows=False)
    if configured and not unleased_sandbox(server_dir):
        key, image = configured[0]
        return (f"needs the image its config names ({key}: {image}), not on this machine; from "
                f"{image_registry(image)}, which this offline machine cannot reach{local}")
    return None  # its sandboxes are gym-compose's, of the image its sandbox_config names: it runs


def unleased_sandbox(server_dir: Path) -> str | None:
    """Why the example rows never lease the sandbox of a server that has one only for a tool (the
    note its sweep line carries), or None."""
    if server_dir.name not in SANDBOX_ONLY_FOR_A_TOOL:
        return None
    tool, how = SANDBOX_ONLY_FOR_A_TOOL[server_dir.name]
    for line in (server_dir / "data" / "example.jsonl").read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError, AttributeError):
            offered = json.loads(line)["responses_create_params"].get("tools") or []
            if any(isinstance(t, dict) and t.get("name") == tool for t in offered):
                return None
    return f"its sandbox is never leased: {how}, and no example row offers {tool}"


def task_images(server_dir: Path, config: dict[str, Any], rows: bool = True) -> list[tuple[str, str]]:
    """(key, value) of every string under a key naming an image, in the example rows and the config."""
    found: dict[tuple[str, str], None] = {}

    def visit(node: Any, key: str = "") -> None:
        if isinstance(node, dict):
            for child, value in node.items():
                visit(value, str(child))
        elif isinstance(node, list):
            for value in node:
                visit(value, key)
        elif isinstance(node, str) and node and "image" in key.lower() and not key.lower().endswith("_path"):
            found[(key, node)] = None

    examples = server_dir / "data" / "example.jsonl"
    if rows and examples.is_file():
        for line in examples.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                visit(json.loads(line))
    visit(config)
    return list(found)


def agent_override(config: dict[str, Any], rows: Path) -> list[str]:
    """`++agent_name=<agent>` when the rows name an agent the config does not define and the config
    has exactly one: NeMo Gym's collector stops on such rows too, and its users pass +agent_name."""
    agents = [key for key, value in config.items() if isinstance(value, dict) and "responses_api_agents" in value]
    if len(agents) == 1 and row_agents(rows) - set(agents):
        return [f"++agent_name={agents[0]}"]
    return []


def sweep_project(default_prefix: str, index: int, name: str) -> str:
    """A compose project name for one sweep run: GYM_COMPOSE_SWEEP_PREFIX (another sweep on the same
    engine picks its own), the run's index and the folder's name, cut to the length gym-compose allows."""
    prefix = os.environ.get("GYM_COMPOSE_SWEEP_PREFIX", default_prefix)
    return f"{prefix}-{index}-{re.sub('[^a-z0-9]+', '-', name.lower())}"[:MAX_PROJECT].strip("-")


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


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
