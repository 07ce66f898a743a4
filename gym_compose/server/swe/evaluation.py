"""Scoring a diff the way SWE-bench Pro's evaluator does, in a sandbox of the task's image:

    cd /app; git reset --hard BASE; git checkout BASE     the repository as the task starts
    apply /workspace/patch.diff                            its status kept in /workspace/patch_apply_status
    <the last line of before_repo_set_cmd>                 brings in the hidden tests
    export <the ENV lines of both Dockerfiles>
    bash /workspace/run_script.sh <selected test files, comma-joined>  > stdout.log 2> stderr.log
    python /workspace/parser.py stdout.log stderr.log output.json      -> {"tests": [{name, status}]}

Resolved iff the patch applied and every fail-to-pass and pass-to-pass test has status PASSED.
The files go into the sandbox when it starts; nothing here runs before the agent's sandbox is
given back, so the hidden tests never meet the agent.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from gym_compose.server.swe.swe_row import SWERow, listed_tests

WORKSPACE = "/workspace"
REPOSITORY = "/app"
PATCH_FILE = f"{WORKSPACE}/patch.diff"
RUN_SCRIPT = f"{WORKSPACE}/run_script.sh"
PARSER = f"{WORKSPACE}/parser.py"
EVAL_SCRIPT = f"{WORKSPACE}/eval.sh"
STDOUT_LOG = f"{WORKSPACE}/stdout.log"
STDERR_LOG = f"{WORKSPACE}/stderr.log"
OUTPUT_JSON = f"{WORKSPACE}/output.json"
APPLY_STATUS = f"{WORKSPACE}/patch_apply_status"
PARSER_TIMEOUT_S = 60.0
READ_LIMIT = 4 << 20

_SECTION = re.compile(r"(?=^diff --git )", re.MULTILINE)

# `git apply` first; when it refuses, GNU patch with some fuzz, tried dry first so that a patch
# that does not apply leaves the tree untouched. An empty patch applies (nothing to do).
APPLY_FUNCTION = f"""apply_candidate() {{
  if [ ! -s {PATCH_FILE} ]; then echo "apply: the patch is empty"; return 0; fi
  if git apply -v --whitespace=nowarn {PATCH_FILE}; then echo "apply: git apply"; return 0; fi
  if command -v patch >/dev/null 2>&1 \\
     && patch -p1 --batch --forward --fuzz=5 --dry-run -i {PATCH_FILE} >/dev/null 2>&1 \\
     && patch -p1 --batch --forward --fuzz=5 --no-backup-if-mismatch -i {PATCH_FILE}; then
    echo "apply: GNU patch with fuzz"; return 0
  fi
  echo "apply: the patch does not apply"; return 1
}}"""


@dataclass
class Evaluation:
    """What one verification found. `completed`: the tests ran and the parser gave a verdict."""

    completed: bool
    resolved: bool
    patch_applied: bool
    test_results: Optional[dict[str, Any]]
    test_output: str = ""
    error: Optional[str] = None
    timed_out: bool = False
    failed_required: list[str] = field(default_factory=list)  # fail-to-pass/pass-to-pass tests not PASSED
    timings: dict[str, float] = field(default_factory=dict)


def patch_sections(patch: str) -> list[str]:
    return [section for section in _SECTION.split(patch) if section.strip()]


def section_path(section: str) -> Optional[str]:
    """The repository path a `diff --git` section changes (its new path; the old one if deleted)."""
    old = new = None
    for line in section.splitlines():
        if line.startswith("@@"):
            break
        if line.startswith("--- ") and old is None:
            old = _diff_path(line[4:], "a/")
        elif line.startswith("+++ ") and new is None:
            new = _diff_path(line[4:], "b/")
    if new or old:
        return new or old
    header = re.match(r"^diff --git a/(.+?) b/(.+)$", section.splitlines()[0])
    return header.group(2) if header else None


def _diff_path(text: str, prefix: str) -> Optional[str]:
    text = text.strip().split("\t")[0]
    return None if text == "/dev/null" else text.removeprefix(prefix)


def without_binary_sections(patch: str) -> str:
    """The patch less its binary sections (the evaluator cannot apply them from text)."""
    kept = [s for s in patch_sections(patch)
            if not re.search(r"^(Binary files .* differ|GIT binary patch)$", s, re.MULTILINE)]
    return "".join(kept)


def without_paths(patch: str, paths: Iterable[str]) -> str:
    """The patch less the sections that change `paths` (files the image shipped untracked)."""
    dropped = set(paths)
    if not dropped:
        return patch
    return "".join(s for s in patch_sections(patch) if section_path(s) not in dropped)


def env_exports(row: SWERow) -> list[str]:
    """The `ENV` lines of the row's Dockerfiles as shell exports (the evaluator's own rule: the
    image's environment is not assumed to carry them)."""
    exports = []
    for dockerfile in (row.base_dockerfile, row.instance_dockerfile):
        for line in dockerfile.splitlines():
            line = line.strip()
            if not line.startswith("ENV ") and not line.startswith("ENV\t"):
                continue
            body = line[4:].strip()
            name, _, rest = body.partition(" ")
            if "=" not in name and rest:  # the legacy `ENV NAME value` form
                exports.append(f"export {name}={shlex.quote(rest.strip())}")
            else:
                exports.append(f"export {body}")
    return exports


def evaluation_script(row: SWERow, prefetch_go_modules: bool = False) -> str:
    before = [line for line in row.before_repo_set_cmd.strip().splitlines() if line.strip()]
    selected = ",".join(listed_tests(row.selected_test_files_to_run))
    base = shlex.quote(row.base_commit)
    go = ""
    if prefetch_go_modules and (row.repo_language.lower() == "go" or "go test " in row.run_script):
        go = "if [ -f go.mod ]; then go mod download; fi"
    return "\n".join([
        "#!/bin/bash",
        *env_exports(row),
        f"cd {REPOSITORY}",
        f"git reset --hard {base}",
        f"git checkout {base}",
        APPLY_FUNCTION,
        "apply_candidate",
        f"echo $? > {APPLY_STATUS}",
        before[-1] if before else "",
        "ulimit -c 0 2>/dev/null || true",
        go,
        f"bash {RUN_SCRIPT} {shlex.quote(selected) if selected else ''} > {STDOUT_LOG} 2> {STDERR_LOG}",
        f"python {PARSER} {STDOUT_LOG} {STDERR_LOG} {OUTPUT_JSON}",
        "",
    ])


def workspace_files(row: SWERow, patch: str, prefetch_go_modules: bool = False) -> dict[str, str]:
    """The files a verification sandbox starts with (SandboxSpec.files)."""
    return {PATCH_FILE: without_binary_sections(patch), RUN_SCRIPT: row.run_script, PARSER: row.parser_script,
            EVAL_SCRIPT: evaluation_script(row, prefetch_go_modules)}


def grade(output: dict[str, Any], row: SWERow) -> tuple[bool, list[str]]:
    """(resolved, the required tests that did not pass) from the parser's output."""
    statuses: dict[str, str] = {}
    for test in output.get("tests") or []:
        if isinstance(test, dict) and isinstance(test.get("name"), str):
            statuses[test["name"]] = str(test.get("status"))
    required = [*listed_tests(row.fail_to_pass), *listed_tests(row.pass_to_pass)]
    failed = [name for name in dict.fromkeys(required) if statuses.get(name) != "PASSED"]
    return not failed, failed


def capped(text: str, limit: int) -> str:
    """`text`, or its head and tail with the cut said, when longer than `limit` characters."""
    if len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


async def run_evaluation(sandbox: Any, row: SWERow, timeout_s: Optional[float], max_output_chars: int) -> Evaluation:
    """Run the evaluation script in `sandbox` (started with `workspace_files`) and grade it."""
    began = time.monotonic()
    result = await sandbox.exec(f"bash {EVAL_SCRIPT}", cwd=REPOSITORY, timeout_s=timeout_s)
    timings = {"tests_s": round(time.monotonic() - began, 3)}
    timed_out = result.error_type == "timeout"
    if result.error_type in ("oom", "sandbox"):
        raise SandboxFailure(f"verification sandbox {getattr(sandbox, 'sandbox_id', '?')}: "
                             f"{result.reason or (result.stderr or '').strip() or result.error_type}")
    if timed_out:  # the parser never ran: give it what the tests printed before they were stopped
        await sandbox.exec(f"python {PARSER} {STDOUT_LOG} {STDERR_LOG} {OUTPUT_JSON}", cwd=REPOSITORY,
                           timeout_s=PARSER_TIMEOUT_S)
    stdout, stderr = await _read(sandbox, STDOUT_LOG), await _read(sandbox, STDERR_LOG)
    status, output_text = await _read(sandbox, APPLY_STATUS), await _read(sandbox, OUTPUT_JSON)
    patch_applied = status.strip() == "0"
    script_output = f"{result.stdout or ''}{result.stderr or ''}"
    test_output = capped(f"STDOUT:\n{stdout}\n\nSTDERR:\n{stderr}", max_output_chars)
    parse_error: Optional[str]
    try:
        parsed = json.loads(output_text) if output_text.strip() else None
    except json.JSONDecodeError as not_json:
        parsed, parse_error = None, f"the parser's output is not JSON: {not_json}"
    else:
        parse_error = None if isinstance(parsed, dict) else "the parser wrote no output.json (a JSON object)"
        parsed = parsed if isinstance(parsed, dict) else None
    if parsed is not None:
        resolved, failed = grade(parsed, row)
        resolved = resolved and patch_applied
    else:
        resolved, failed = False, []
    limit = f"{timeout_s:g} s" if timeout_s else "its limit"
    if timed_out:
        # A required test that already failed is a verdict; otherwise there is none.
        conclusive = patch_applied and parsed is not None and any(
            t.get("status") == "FAILED" and t.get("name") in failed for t in parsed.get("tests") or [])
        error = None if conclusive else f"the test command ran past its time limit ({limit}) and was stopped"
        return Evaluation(completed=conclusive, resolved=False, patch_applied=patch_applied, test_results=parsed,
                          test_output=test_output, error=error, timed_out=True, failed_required=failed,
                          timings=timings)
    if not patch_applied:
        return Evaluation(completed=True, resolved=False, patch_applied=False, test_results=parsed,
                          test_output=test_output, error="the patch does not apply at the base commit: "
                          + capped(script_output.strip(), 2000), failed_required=failed, timings=timings)
    if parsed is None:
        return Evaluation(completed=False, resolved=False, patch_applied=True, test_results=None,
                          test_output=test_output, error=parse_error, failed_required=failed, timings=timings)
    error = None if result.return_code == 0 else f"the evaluation script exited with {result.return_code}"
    return Evaluation(completed=result.return_code == 0, resolved=resolved, patch_applied=True, test_results=parsed,
                      test_output=test_output, error=error, failed_required=failed, timings=timings)


async def _read(sandbox: Any, path: str) -> str:
    try:
        data = await sandbox.read_file(path)
    except Exception:  # a file the script never wrote (it stopped earlier)
        return ""
    return data[:READ_LIMIT].decode("utf-8", "replace")


class SandboxFailure(RuntimeError):
    """A sandbox died or was OOM-killed: the rollout cannot be scored (it becomes a failure row)."""
