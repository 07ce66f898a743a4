"""Rows of NeMo Gym 0.7's swe_next, swemer_oml, deepswe and denovo_swe servers filled from
swebench_mini's tasks, for their own code to verify swebench_mini's task images (Debian's python3,
pytest and git; the repository at /app at its base commit; no conda, no /testbed, no venv); and
deepswe's task store. Each `<server>_fields` function takes a swebench_mini row
(benchmarks/swebench_mini/data/swebench_mini.jsonl) and returns that server's fields;
tests/support/nemo_gym_swe.py fills the keys of the server's `data/example.jsonl` with them."""

from __future__ import annotations

import fcntl
import hashlib
import json
import posixpath
import shlex
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

IMAGE_PYTHON = "/usr/bin/python3"  # Debian's interpreter in every swebench_mini image


def task_tests(mini: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """The task's test files, FAIL_TO_PASS and PASS_TO_PASS (pytest node ids)."""
    return (json.loads(mini["selected_test_files_to_run"]), json.loads(mini["fail_to_pass"]),
            json.loads(mini["pass_to_pass"]))


# --- swe_next ------------------------------------------------------------------------------------
# Its verifier (swe_next/verification.py) cds to the row's `workdir`, `git apply`s the patch and the
# row's `test_patch`, runs the fixed R2E command `.venv/bin/python -W ignore -m pytest -rA r2e_tests`
# there and grades with `expected_output_json` ({name after the first "::": "PASSED"|...}): every
# test expected PASSED must come back PASSED. An R2E image bakes `.venv` and `r2e_tests/`; a
# swebench_mini image has neither, so the row's test_patch adds them as symlinks (what a venv's
# bin/python is anyway; r2e_tests/<file> -> the task's test file), after swebench_mini's own hidden
# tests. The sandbox's workdir is fixed to /workspace by swe_next's code (app.py `_create_sandbox`),
# which gym-compose's broker makes; `ln -sfn /workspace /app` then only adds /app/workspace.

def _symlink_section(path: str, target: str) -> str:
    """A `diff --git` section creating the symlink `path` -> `target` (git's mode 120000)."""
    blob = hashlib.sha1(f"blob {len(target.encode())}\0".encode() + target.encode()).hexdigest()
    return (f"diff --git a/{path} b/{path}\nnew file mode 120000\nindex 0000000..{blob[:7]}\n"
            f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n")


def _r2e_key(test_id: str) -> str:
    """swe_next's test name: the node id without its file (parse_pytest_short_summary's rule)."""
    return test_id.split("::", 1)[1]


def swe_next_fields(mini: dict[str, Any]) -> dict[str, Any]:
    files, fail_to_pass, pass_to_pass = task_tests(mini)
    test_patch = mini["test_patch"] if mini["test_patch"].endswith("\n") else mini["test_patch"] + "\n"
    test_patch += _symlink_section(".venv/bin/python", IMAGE_PYTHON)
    for file in files:
        test_patch += _symlink_section(f"r2e_tests/{posixpath.basename(file)}", posixpath.join("..", file))
    # the golden-patched run: every FAIL_TO_PASS and PASS_TO_PASS test passes
    expected = {_r2e_key(test): "PASSED" for test in fail_to_pass + pass_to_pass}
    return {"image_ref": f"swebench-mini:{mini['dockerhub_tag']}", "workdir": "/app", "language": "python",
            "test_patch": test_patch, "FAIL_TO_PASS": [_r2e_key(t) for t in fail_to_pass],
            "PASS_TO_PASS": [_r2e_key(t) for t in pass_to_pass], "expected_output_json": json.dumps(expected)}


# --- swemer_oml ----------------------------------------------------------------------------------
# Its verifier (swemer_oml/verification.py) writes the row's test_sh, config_json, grade_py (and
# test_patch as test.patch) to /tests, applies the candidate patch in `workdir`, runs
# `bash /tests/test.sh` and reads /logs/verifier/reward.txt ("0"/"1"). test.sh prints
# "ERROR: test.patch failed to apply" when the hidden tests do not install and
# "VERIFIER: grader produced no reward" when grade.py wrote nothing (both fail closed, reward 0).

MINI_TEST_SH = """#!/bin/bash
# swebench_mini task {task}, graded the OML package way: put the graded test files back as the
# image has them, install the hidden tests from test.patch beside this script, run pytest -rA on
# the task's test files, and let grade.py turn the output into /logs/verifier/reward.txt (1 or 0).
set -uo pipefail
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
reward=/logs/verifier/reward.txt
results=/workspace/test-results
mkdir -p "$(dirname "$reward")" "$results"
give_zero() {{ echo "$1" >&2; echo 0 > "$reward"; exit 1; }}
cd {workdir} || give_zero "no repository at {workdir}"
for dir in {test_dirs}; do
  git checkout -q {base} -- "$dir" 2>/dev/null && git clean -fdq -- "$dir"
done
if [ -s "$here/test.patch" ] && ! git apply --whitespace=nowarn "$here/test.patch"; then
  give_zero "ERROR: test.patch failed to apply; the hidden tests are not in place"
fi
python -m pytest -rA -p no:cacheprovider {test_files} > "$results/stdout.txt" 2>&1
status=$?
cat "$results/stdout.txt"
grader="$(command -v python3 || command -v python)"
"$grader" "$here/grade.py" --stdout "$results/stdout.txt" --config "$here/config.json" \\
  --exit-code "$status" --reward-out "$reward" || true
if [ ! -s "$reward" ]; then
  echo "VERIFIER: grader produced no reward; scoring 0" >&2
  echo 0 > "$reward"
fi
exit "$status"
"""

MINI_GRADE_PY = '''#!/usr/bin/env python3
"""Grades one swebench_mini run for the OML package contract. Reads the outcome lines of pytest's
-rA summary ("PASSED tests/test_x.py::test_y", "FAILED ... - reason") from --stdout and the test ids
of --config (FAIL_TO_PASS, PASS_TO_PASS); writes 1 to --reward-out when every one of them is
reported PASSED, else 0. A test that never ran counts as not passed."""
import argparse
import json

OUTCOMES = {"PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS"}


def reported(text):
    found = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in OUTCOMES and "::" in words[1]:
            found.setdefault(words[1], words[0])
    return found


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--stdout", "--config", "--reward-out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--exit-code", type=int, required=True)
    args = parser.parse_args()
    with open(args.config) as handle:
        config = json.load(handle)
    with open(args.stdout, errors="replace") as handle:
        found = reported(handle.read())
    wanted = [*config.get("FAIL_TO_PASS", []), *config.get("PASS_TO_PASS", [])]
    missing = [test for test in wanted if found.get(test) != "PASSED"]
    reward = int(bool(wanted) and not missing)
    print(f"grade.py: {len(wanted) - len(missing)}/{len(wanted)} required tests passed "
          f"(pytest exit {args.exit_code}); reward {reward}")
    for test in missing:
        print(f"grade.py: not passed: {test} ({found.get(test, 'not run')})")
    with open(args.reward_out, "w") as handle:
        handle.write(f"{reward}\\n")


if __name__ == "__main__":
    main()
'''


def swemer_oml_fields(mini: dict[str, Any]) -> dict[str, Any]:
    files, fail_to_pass, pass_to_pass = task_tests(mini)
    workdir = "/app"
    test_dirs = sorted({posixpath.dirname(file) or "." for file in files})
    test_sh = MINI_TEST_SH.format(task=mini["dockerhub_tag"], workdir=workdir, base=shlex.quote(mini["base_commit"] or "HEAD"),
                                  test_dirs=" ".join(shlex.quote(d) for d in test_dirs),
                                  test_files=" ".join(shlex.quote(f) for f in files))
    config = {"FAIL_TO_PASS": fail_to_pass, "PASS_TO_PASS": pass_to_pass, "framework": "pytest",
              "f2p_synthetic": False}
    return {"image_ref": f"swebench-mini:{mini['dockerhub_tag']}", "workdir": workdir, "toml_workdir": workdir,
            "language": "python", "delivery": "swebench_mini", "prompt_statement": mini["problem_statement"],
            "test_sh": test_sh, "config_json": json.dumps(config, indent=2) + "\n", "grade_py": MINI_GRADE_PY,
            "test_framework": "pytest", "FAIL_TO_PASS": fail_to_pass, "PASS_TO_PASS": pass_to_pass,
            "f2p_synthetic": False, "keywords": ["python"], "agent_timeout_sec": 300.0,
            "verifier_timeout_sec": 300.0, "task_source": "swemer_oml_example_agent"}


# --- deepswe -------------------------------------------------------------------------------------
# Its server (deepswe/app.py) serves the tasks of a task store, `tasks_dir` (NeMo Gym's prepare.py
# copies DeepSWE's there), each a Pier task folder that task_store.py validates: task.toml (schema
# 1.3, separate verifier environment, no network, one collect hook that must read exactly
# `git diff --binary <base_commit_hash> HEAD` into /logs/artifacts/model.patch) and the files of
# REQUIRED_TASK_FILES; the folder's name is `metadata.task_id`, and the store must hold
# `expected_task_count` tasks. A row names a task (`task_id`, `verifier_metadata.task_id`) and the
# image it pins. The agent works in a sandbox of that image (seed_session); verify runs the collect
# hook there (committed work only), then in a fresh sandbox stages tests/ at /tests and the patch
# at /logs/artifacts/model.patch, runs `bash /tests/test.sh` in /app and reads
# /logs/verifier/reward.json (a binary reward, DeepSWE's f2p/p2p counts) and ctrf.json.
# swebench_mini's tasks are named `swebench_mini__<task>` there (DeepSWE's ids are kebab-case).

DEEPSWE_TASKS = "resources_servers/deepswe/data/cache/tasks"  # deepswe.yaml's tasks_dir (prepare.py's)
DEEPSWE_MARKER = ".gym_compose_swebench_mini"  # in a store written here; never replace a store without it

DEEPSWE_TEST_SH = """#!/bin/bash
# swebench_mini task {task} in DeepSWE's layout: the agent's committed work (model.patch, from the
# collect hook) applied on the base commit, the test files reset and the hidden tests (test.patch)
# laid over them, pytest -rA on the task's test files; grader.py writes /logs/verifier/reward.json.
set -u
mkdir -p /logs/verifier
cd /app || exit 1
git config --global --add safe.directory /app
git reset -q --hard {base} && git clean -fdq
apply_failed=0
if [ -s /logs/artifacts/model.patch ]; then
  git apply --whitespace=nowarn /logs/artifacts/model.patch || apply_failed=1
fi
for dir in {test_dirs}; do
  git checkout -q {base} -- "$dir" && git clean -fdq -- "$dir"
done
git apply --whitespace=nowarn /tests/test.patch || echo "test.patch did not apply"
python3 -m pytest -rA -p no:cacheprovider {test_files} > /logs/verifier/run.log 2>&1
cat /logs/verifier/run.log
python3 /tests/grader.py "$apply_failed"
"""

DEEPSWE_GRADER = '''"""Grades one swebench_mini task in DeepSWE's layout: the outcome lines of pytest -rA in
/logs/verifier/run.log against the test ids of /tests/config.json. Writes /logs/verifier/reward.json
(reward 1.0 when the patch applied and every FAIL_TO_PASS and PASS_TO_PASS test PASSED, else 0.0,
with DeepSWE's counts) and /logs/verifier/ctrf.json (a CTRF report of those tests)."""
import json
import sys

apply_failed = sys.argv[1:] == ["1"]
config = json.load(open("/tests/config.json"))
passed = {words[1] for words in map(str.split, open("/logs/verifier/run.log", errors="replace"))
          if len(words) > 1 and words[0] == "PASSED"}
f2p, p2p = config["FAIL_TO_PASS"], config["PASS_TO_PASS"]
f2p_passed, p2p_passed = sum(t in passed for t in f2p), sum(t in passed for t in p2p)
resolved = not apply_failed and f2p_passed == len(f2p) and p2p_passed == len(p2p)
reward = {"reward": 1.0 if resolved else 0.0, "apply_failed": apply_failed,
          "f2p_total": len(f2p), "f2p_passed": f2p_passed, "p2p_total": len(p2p), "p2p_passed": p2p_passed,
          "f2p": f2p_passed / len(f2p) if f2p else 1.0, "p2p": p2p_passed / len(p2p) if p2p else 1.0,
          "partial": (f2p_passed + p2p_passed) / max(len(f2p) + len(p2p), 1)}
tests = [{"name": t, "status": "passed" if t in passed else "failed", "duration": 0} for t in f2p + p2p]
summary = {"tests": len(tests), "passed": f2p_passed + p2p_passed, "failed": len(tests) - f2p_passed - p2p_passed,
           "pending": 0, "skipped": 0, "other": 0, "start": 0, "stop": 0}
json.dump(reward, open("/logs/verifier/reward.json", "w"))
json.dump({"results": {"tool": {"name": "pytest"}, "summary": summary, "tests": tests}},
          open("/logs/verifier/ctrf.json", "w"))
print(json.dumps(reward))
'''


def deepswe_task_id(mini: dict[str, Any]) -> str:
    return f"swebench_mini__{mini['dockerhub_tag']}"


def _deepswe_prompt(mini: dict[str, Any]) -> str:
    return (mini["responses_create_params"]["input"][0]["content"] + "\nCommit your change with git "
            "(`git add -A && git commit -m ...`) when it is done: only committed work is graded.\n")


def deepswe_fields(mini: dict[str, Any]) -> dict[str, Any]:
    task_id = deepswe_task_id(mini)
    return {"image": f"swebench-mini:{mini['dockerhub_tag']}", "task_id": task_id,
            "verifier_metadata": {"task_id": task_id}, "split": "test", "subset": "swebench_mini",
            "responses_create_params": {"input": [{"role": "user", "content": _deepswe_prompt(mini)}]}}


def deepswe_task_files(mini: dict[str, Any]) -> dict[str, str]:
    """The task folder (relative path -> text) of a swebench_mini task in DeepSWE's layout."""
    task, base, image = mini["dockerhub_tag"], mini["base_commit"], f"swebench-mini:{mini['dockerhub_tag']}"
    files, fail_to_pass, pass_to_pass = task_tests(mini)
    collect = ("cd /app && mkdir -p /logs/artifacts && git config --global --add safe.directory /app "
               f"&& git diff --binary {base} HEAD > /logs/artifacts/model.patch")
    toml = (f'schema_version = "1.3"\n\n[task]\nname = "gym-compose/{deepswe_task_id(mini)}"\n'
            f'description = "swebench_mini task {task} in DeepSWE\'s task layout (written by gym-compose\'s tests)"\n\n'
            f'[metadata]\ntask_id = "{deepswe_task_id(mini)}"\nbase_commit_hash = "{base}"\n'
            f'repository_url = "https://gym-compose.invalid/swebench_mini/{task}"\nlanguage = "python"\n\n'
            '[verifier]\nnetwork_mode = "no-network"\nenvironment_mode = "separate"\ntimeout_sec = 300.0\n\n'
            f'[[verifier.collect]]\ncommand = "{collect}"\ntimeout_sec = 120.0\n\n'
            '[agent]\nnetwork_mode = "no-network"\ntimeout_sec = 900.0\n\n'
            f'[environment]\ndocker_image = "{image}"\ncpus = 1\nmemory_mb = 1024\n')
    test_dirs = sorted({posixpath.dirname(file) or "." for file in files})
    test_sh = DEEPSWE_TEST_SH.format(task=task, base=shlex.quote(base), test_dirs=" ".join(map(shlex.quote, test_dirs)),
                                     test_files=" ".join(map(shlex.quote, files)))
    config = {"FAIL_TO_PASS": fail_to_pass, "PASS_TO_PASS": pass_to_pass}
    return {"task.toml": toml, "instruction.md": _deepswe_prompt(mini), "tests/test.sh": test_sh,
            "tests/test.patch": mini["test_patch"], "tests/grader.py": DEEPSWE_GRADER,
            "tests/config.json": json.dumps(config, indent=2) + "\n", "solution/solution.patch": mini["patch"]}


def write_deepswe_store(store: Path, minis: Iterable[dict[str, Any]]) -> int:
    """Fill the task store `store` with `minis` in DeepSWE's layout, as prepare.py fills it: written
    beside it, then renamed into place whole, under a lock (test workers may ask at once); left as it
    is when it already holds exactly these files. Refuses a store that it did not write (DeepSWE's).
    Returns the number of tasks (the store's `expected_task_count`)."""
    minis = list(minis)
    wanted = {f"{deepswe_task_id(mini)}/{path}": text for mini in minis for path, text in deepswe_task_files(mini).items()}
    wanted[DEEPSWE_MARKER] = "swebench_mini's tasks in DeepSWE's layout, written by gym-compose's tests\n"
    store.parent.mkdir(parents=True, exist_ok=True)
    with open(store.parent / f"{store.name}.gym-compose.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if store.exists():
            if not (store / DEEPSWE_MARKER).is_file():
                raise FileExistsError(f"{store} holds a task store gym-compose's tests did not write; move it away")
            held = {p.relative_to(store).as_posix(): p.read_text() for p in store.rglob("*") if p.is_file()}
            if held == wanted:
                return len(minis)
        for stale in store.parent.glob(f".{store.name}-*"):  # an interrupted write's
            shutil.rmtree(stale)
        partial = Path(tempfile.mkdtemp(prefix=f".{store.name}-", dir=store.parent))
        for path, text in wanted.items():
            (partial / path).parent.mkdir(parents=True, exist_ok=True)
            (partial / path).write_text(text)
        if store.exists():
            old = partial.with_name(partial.name + "-old")
            store.rename(old)
            shutil.rmtree(old)
        partial.chmod(0o755)
        partial.rename(store)
    return len(minis)


# --- denovo_swe ----------------------------------------------------------------------------------
# A document-to-repository benchmark: the agent rewrites the package from a spec after seed_session
# wipes it. Golden-patch mode (denovo_swe_golden_patch_resources_server, verification.py
# build_eval_script) grades the image's own source instead, as NeMo Gym's example rows ask
# (`patch: ""`, `base_commit: HEAD`): checkout of base_commit, EVERY test file deleted (folders
# named tests, test, testing, ...; test_*.py, *_test.py, *_tests.py, conftest.py), the row's
# test_patch laid from scratch (so it adds each test file whole), `pip install -e .` (none here: no
# packaging, pytest imports from /app), then pytest per file on `passed_ptp`: reward 1 only when
# every one of them passes. On a swebench_mini image (the buggy base) FAIL_TO_PASS fails.

def _is_test_file(path: str) -> bool:
    *folders, name = path.split("/")
    return (any(folder.lower() in {"tests", "test", "testing", "testsuite", "testsuites", "test_suite"}
                for folder in folders)
            or name.startswith("test_") or name.endswith(("_test.py", "_tests.py")) or name == "conftest.py")


def _new_files_diff(files: dict[str, str]) -> str:
    """A `diff --git` that adds `files` (path -> text, each ending in a newline)."""
    sections = []
    for path, text in sorted(files.items()):
        lines = text.splitlines(keepends=True)
        sections.append(f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
                        f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}" for line in lines))
    return "".join(sections)


def denovo_swe_fields(mini: dict[str, Any], task_dir: Path) -> dict[str, Any]:
    """`task_dir`: the task's folder (benchmarks/swebench_mini/tasks/<task>): its repository's test
    files, with the hidden tests over them, make the test_patch."""
    _, fail_to_pass, pass_to_pass = task_tests(mini)
    tests = {path.relative_to(root).as_posix(): path.read_text()
             for root in (task_dir / "repo", task_dir / "hidden_tests") for path in sorted(root.rglob("*.py"))
             if "__pycache__" not in path.parts and _is_test_file(path.relative_to(root).as_posix())}
    packages = sorted({path.relative_to(task_dir / "repo").parts[0] for path in (task_dir / "repo").glob("*/__init__.py")})
    document = f"{mini['problem_statement'].strip()}\n\nRequirements:\n{mini['requirements'].strip()}\n"
    return {"instance_id": mini["instance_id"], "repo": mini["repo"], "language": "python", "workdir": "/app",
            "image_ref": f"swebench-mini:{mini['dockerhub_tag']}", "base_commit": "HEAD", "patch": "",
            "test_patch": _new_files_diff(tests), "document": document, "problem_statement": document,
            "pypi_name": "", "import_names": packages, "passed_ptp": fail_to_pass + pass_to_pass, "failed_ptp": [],
            "expected_coverage_percent": 0.0,
            "responses_create_params": {"input": [{"role": "user", "content": document}]}}
