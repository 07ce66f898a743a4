"""Artifacts that reproduce, on the real engine: `eval rerun` of a finished run gives the same
rewards and outputs from its manifest alone; `eval compare` shows no delta between them, and every
task flipped against a rerun with the adversary; an image of the manifest that is gone is named,
and built again with --rebuild only from the same recipe."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.ports import free_port

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "gym_compose"]
PROJECT = f"{PROJECT_PREFIX}-rerun"
ADVERSARY = "++policy_model.responses_api_models.mock_model.mode=adversary"



def gym_compose(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          stdin=subprocess.DEVNULL)


def new_run(results: Path, before: set[Path]) -> Path:
    (run_dir,) = set(results.iterdir()) - before
    return run_dir


def rollouts(run_dir: Path) -> dict[tuple, tuple]:
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    return {(row["_ng_task_index"], row["_ng_rollout_index"]): (row["reward"], row["response"]["output"])
            for row in rows}


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("rerun") / "results"
    done = gym_compose("up", "--benchmark", "gsm8k", "--limit", "4", "--num-repeats", "2", "-p", PROJECT,
                       "--head-port", str(free_port()), "--results-dir", str(results), cwd=REPO)
    assert done.returncode == 0, done.stderr
    (run_dir,) = results.iterdir()
    return run_dir


def rerun(run_dir: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path | None]:
    results = run_dir.parent
    before = set(results.iterdir())
    done = gym_compose("eval", "rerun", str(run_dir), "-p", PROJECT, "--head-port", str(free_port()), *extra, cwd=REPO)
    after = set(results.iterdir()) - before
    return done, (after.pop() if after else None)


def test_the_manifest_records_what_a_rerun_needs(original):
    manifest = json.loads((original / "manifest.json").read_text())
    assert manifest["collection"] == {"input": "input.jsonl", "collector_args": ["--limit", "4"], "num_repeats": 2,
                                      "prompt_config": None}
    provenance = manifest["provenance"]
    assert provenance["models"]["policy_model"] == {"implementation": "mock_model", "endpoints": {}, "names": {},
                                                    "mode": "oracle"}
    assert provenance["rows"]["input"]["rows"] == 30 and len(provenance["rows"]["input"]["sha256"]) == 64
    assert provenance["rows"]["datasets"][0]["file"].endswith("benchmarks/gsm8k/data/gsm8k_subset.jsonl")
    assert provenance["engine"]["engine"] and provenance["engine"]["compose"]
    assert provenance["gym_compose"]["version"] and "commit" in provenance["gym_compose"]
    assert all(entry["id"].startswith("sha256:") for entry in manifest["images"].values())


def test_a_rerun_gives_the_same_rollouts_and_compare_shows_no_delta(original):
    done, again = rerun(original)
    assert done.returncode == 0, done.stderr
    assert again.name.startswith("gsm8k-rerun-")
    first, second = rollouts(original), rollouts(again)
    assert len(first) == 8 and first == second  # same rewards, same outputs, whatever the finishing order
    manifest = json.loads((again / "manifest.json").read_text())
    recorded = json.loads((original / "manifest.json").read_text())
    assert manifest["rerun_of"] == str(original)
    assert {key: entry["id"] for key, entry in manifest["images"].items()} == \
        {key: entry["id"] for key, entry in recorded["images"].items()}
    assert (again / "input.jsonl").read_bytes() == (original / "input.jsonl").read_bytes()
    compared = gym_compose("eval", "compare", str(original), str(again), "--json", cwd=REPO)
    assert compared.returncode == 0, compared.stderr
    comparison = json.loads(compared.stdout)
    assert comparison["flipped"] == [] and comparison["tasks"] == {"common": 4, "only_a": 0, "only_b": 0}
    assert comparison["metrics"] and all(row["delta"] == 0 for row in comparison["metrics"])


def test_a_gone_image_is_named_and_rebuilt_only_from_the_same_recipe(original, tmp_path):
    copy = original.parent / "gsm8k-20000101-000000"
    shutil.copytree(original, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    server = "gsm8k-math-answer-resources-server"
    manifest["images"][server]["id"] = "sha256:" + "0" * 64  # an image this engine never had
    (copy / "manifest.json").write_text(json.dumps(manifest))
    refused, made = rerun(copy)
    assert refused.returncode == 2 and made is None
    assert server in refused.stderr and manifest["images"][server]["image"] in refused.stderr
    assert "--rebuild" in refused.stderr

    rebuilt, adversary = rerun(copy, "--rebuild", ADVERSARY)  # the same recipe: its tag exists again
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert {reward for reward, _ in rollouts(adversary).values()} == {0.0}
    compared = gym_compose("eval", "compare", str(original), str(adversary), cwd=REPO)
    assert compared.returncode == 0, compared.stderr
    assert "tasks: 4 in both, 4 flipped (4 pass -> fail, 0 fail -> pass)" in compared.stdout

    manifest["images"][server]["image"] = manifest["images"][server]["image"].rsplit(":", 1)[0] + ":0000000000000000"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    changed, made = rerun(copy, "--rebuild")
    assert changed.returncode == 2 and made is None
    assert "recipe of these images changed" in changed.stderr and server in changed.stderr


def test_a_rerun_asks_for_the_secrets_the_manifest_masks(original):
    copy = original.parent / "gsm8k-20000102-000000"
    shutil.copytree(original, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    mock = manifest["resolved_config"]["policy_model"]["responses_api_models"]["mock_model"]
    mock["required_api_key"] = "****"  # as a run against a keyed model records it
    manifest["resolved_config"]["policy_api_key"] = "****"
    manifest["provenance"]["secrets"] = {
        "policy_api_key": "policy_api_key",
        "policy_model.responses_api_models.mock_model.required_api_key": "policy_api_key"}
    (copy / "manifest.json").write_text(json.dumps(manifest))
    refused, made = rerun(copy)
    assert refused.returncode == 2 and made is None
    assert "policy_model.responses_api_models.mock_model.required_api_key" in refused.stderr
    assert "--model-api-key" in refused.stderr and "****" not in refused.stderr.replace("'****'", "")
