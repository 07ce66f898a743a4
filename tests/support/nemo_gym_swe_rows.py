"""Rows of NeMo Gym 0.7's swe_next and swemer_oml servers filled from swebench_mini's tasks, for
their own code to verify swebench_mini's task images (Debian's python3, pytest and git; the
repository at /app at its base commit; no conda, no /testbed, no venv). Each function takes a
swebench_mini row (benchmarks/swebench_mini/data/swebench_mini.jsonl) and returns that server's
fields; tests/support/nemo_gym_swe.py fills the keys of the server's `data/example.jsonl` with them."""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
from typing import Any

IMAGE_PYTHON = "/usr/bin/python3"  # Debian's interpreter in every swebench_mini image


def _tests(mini: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
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
    files, fail_to_pass, pass_to_pass = _tests(mini)
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
    files, fail_to_pass, pass_to_pass = _tests(mini)
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
