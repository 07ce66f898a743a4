"""The NeMo Gym server sweep, sampled (the full sweep: bench/bench_nemo_gym_servers.py, its table
in docs/nemo-gym-runtime.md). A fixed, representative sample of NeMo Gym 0.7's own resources
servers, fetched from the nemo-gym wheel on PyPI at test time, runs its example rows end to end
with the mock model, and each completes every rollout with the reward the full sweep recorded:

- citation_if: the lean runtime (its nemo_gym imports are all in the compatibility layer);
- bunsenbench_chemistry_mcq: the NeMo Gym runtime, no packages of its own;
- asr_with_pc: the NeMo Gym runtime chosen because app.py imports numpy (nemo-gym's dependency,
  not the lean base's), with its own requirements (jiwer, whisper_normalizer) on top;
- equivalence_llm_judge: the NeMo Gym runtime with the shadow layer: its `datasets==4.0.0` (and
  the dependencies that pin needs) shadow the runtime's newer datasets;
- swebench_pro: a sandboxed NeMo Gym server on gym-compose's sandboxes. Its example rows' images are
  on Docker Hub (the full sweep excludes it for that), so the sample gives it swebench_mini's task
  images, built here, in its own row format: golden-patch verification scores the gold patch 1.0
  and an empty one 0.0 (tests/e2e/test_nemo_gym_swe_servers.py has the whole proof).
"""

from __future__ import annotations

import re
import subprocess

import pytest

from gym_compose.contract import MAX_PROJECT
from tests.e2e import PROJECT_PREFIX
from tests.support.e2e import BUILDS_NEMO_GYM_RUNTIME, remove_project, run_rows
from tests.support.nemo_gym_swe import KEY, nemo_gym_row, run_swebench_pro, with_mock_mode

pytestmark = [pytest.mark.docker, BUILDS_NEMO_GYM_RUNTIME]

SAMPLE = [
    # server, runtime, mean reward of the mock model's answers on data/example.jsonl (5 rows each),
    # packages the server image holds at its own version, ahead of the runtime's (the shadow layer),
    # modules its server imports, from the runtime and from its own requirements
    ("citation_if", "lean", 0.2, {}, ()),
    ("bunsenbench_chemistry_mcq", "nemo_gym", 1.0, {}, ("nemo_gym",)),
    ("asr_with_pc", "nemo_gym", 1.0, {}, ("nemo_gym", "jiwer", "whisper_normalizer")),
    ("equivalence_llm_judge", "nemo_gym", 0.0, {"datasets": "4.0.0"}, ("nemo_gym", "datasets")),
]


@pytest.fixture
def project(server):
    # one project per sampled server: the shared fixture's name (the test name cut to 30 characters)
    # would be the same for every parameter
    name = f"{PROJECT_PREFIX}-sweep-{server.replace('_', '-')}"[:MAX_PROJECT]
    yield name
    remove_project(name)


@pytest.mark.parametrize(("server", "runtime", "mean_reward", "shadowed", "imports"), SAMPLE,
                         ids=[s[0] for s in SAMPLE])
def test_sampled_nemo_gym_server_completes_its_example_rows(nemo_gym_checkout, project, tmp_path,  # noqa: F811
                                                            server, runtime, mean_reward, shadowed, imports):
    rollouts, output = run_rows(nemo_gym_checkout, project, tmp_path, server)
    assert ("(NeMo Gym runtime)" in output) == (runtime == "nemo_gym"), output[-3000:]
    rewards = [float(r["reward"]) for r in rollouts]
    assert sum(rewards) / len(rewards) == pytest.approx(mean_reward)
    images = set(re.findall(r"server image (\S+-nemo-gym:[0-9a-f]+)", output))
    if shadowed:
        (image,) = images
        assert _versions_in(image, shadowed) == {name: (version, "/opt/server-packages")
                                                 for name, version in shadowed.items()}
    if imports:
        (image,) = images
        assert _imported_without_bytecode(image, imports) == []


def _imported_without_bytecode(image: str, modules: tuple[str, ...]) -> list[str]:
    """The modules that, imported as the server's user, are compiled again because the image's
    bytecode is missing or stale (the user cannot write it: every start of the server pays it)."""
    done = subprocess.run(["docker", "run", "--rm", "--entrypoint", "python", image, "-v", "-c",
                           "; ".join(f"import {module}" for module in modules)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    # python -v: "# code object from <file>.py" for a module compiled from source ('<file>.pyc', quoted, when read)
    return [line for line in done.stderr.splitlines() if line.startswith("# code object from ") and line.endswith(".py")]


def test_sampled_sandboxed_nemo_gym_server_verifies_task_images_built_here(nemo_gym_checkout, tmp_path):  # noqa: F811
    name = f"{PROJECT_PREFIX}-sweep-swebench-pro"
    gold = nemo_gym_row(nemo_gym_checkout, "pager_last_page")
    rows = [with_mock_mode({**gold, "patch": patch}, "plain") for patch in (gold["patch"], "")]
    try:
        rollouts, _ = run_swebench_pro(nemo_gym_checkout, name, tmp_path, rows, f"{KEY}.is_verifying_golden_patch=true")
    finally:
        remove_project(name)
    assert sorted((row["patch"] != "", row["reward"]) for row in rollouts) == [(False, 0.0), (True, 1.0)]


def _versions_in(image: str, names: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Each package's version and the sys.path entry it is imported from, inside the image."""
    script = ("import importlib, importlib.metadata as m, pathlib, sys\n"
              "for name in sys.argv[1:]:\n"
              "    where = pathlib.Path(importlib.import_module(name).__file__).parent.parent\n"
              "    print(name, m.version(name), where)\n")
    done = subprocess.run(["docker", "run", "--rm", "--entrypoint", "python", image, "-c", script, *names],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {name: (version, where) for name, version, where in (line.split() for line in done.stdout.splitlines())}
