"""SWE-bench Pro verification logic, checked on NeMo Gym's own example rows (tests/fixtures/
swebench_pro) with no image: the rows read unchanged, the evaluation script holds the evaluator's
steps, the rows' run scripts and our script are valid bash, and each row's own parser script turns
test output into a verdict that grades resolved exactly when every required test passed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gym_compose.server.swe.evaluation import (
    APPLY_STATUS,
    EVAL_SCRIPT,
    PARSER,
    PATCH_FILE,
    RUN_SCRIPT,
    env_exports,
    evaluation_script,
    grade,
    patch_sections,
    section_path,
    without_binary_sections,
    without_paths,
    workspace_files,
)
from gym_compose.server.swe.swe_row import SWERow, listed_tests, row_image

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "swebench_pro" / "example.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
IDS = [row["instance_id"].split("__")[1][:40] for row in ROWS]


def required(row: dict) -> list[str]:
    return [*listed_tests(row["fail_to_pass"]), *listed_tests(row["pass_to_pass"])]


def printed_output(row: dict, statuses: dict[str, str]) -> str:
    """What the row's test command prints for these outcomes, in the form its parser reads."""
    if "--reporter=json" in row["run_script"]:  # mocha's JSON reporter (NodeBB)
        keys = {"PASSED": "passes", "FAILED": "failures", "SKIPPED": "pending"}
        report: dict[str, list] = {"passes": [], "failures": [], "pending": []}
        for name, status in statuses.items():
            file, title = name.split(" | ", 1)
            report[keys[status]].append({"file": f"/app/{file}", "fullTitle": f"{file}::{title}"})
        return "Running selected tests\n" + json.dumps(report, indent=2) + "\n"
    if "[gw" in row["parser_script"]:  # pytest-xdist
        return "".join(f"[gw0] [ 50%] {status} {name} \n" for name, status in statuses.items())
    return "".join(f"{name} {status}                                [ 50%]\n" for name, status in statuses.items())


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_rows_read_unchanged(row):
    parsed = SWERow.model_validate(row)
    assert parsed.model_dump(exclude_unset=True) == row  # no field lost or changed
    assert listed_tests(row["fail_to_pass"]) and listed_tests(row["selected_test_files_to_run"])
    assert row_image(parsed, "docker.io/jefzda/sweap-images") == f"docker.io/jefzda/sweap-images@{row['image_digest']}"
    no_digest = parsed.model_copy(update={"image_digest": ""})
    assert row_image(no_digest, "docker.io/jefzda/sweap-images").endswith(f":{row['dockerhub_tag']}")


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_evaluation_script_holds_the_evaluators_steps(row, tmp_path):
    parsed = SWERow.model_validate(row)
    script = evaluation_script(parsed)
    lines = script.splitlines()
    reset = lines.index(f"git reset --hard {row['base_commit']}")
    apply = lines.index("apply_candidate")
    before = lines.index(row["before_repo_set_cmd"].strip().splitlines()[-1])
    tests = next(i for i, line in enumerate(lines) if line.startswith(f"bash {RUN_SCRIPT} "))
    parse = lines.index(f"python {PARSER} /workspace/stdout.log /workspace/stderr.log /workspace/output.json")
    assert reset < apply < before < tests < parse
    assert lines[apply + 1] == f"echo $? > {APPLY_STATUS}"
    assert ",".join(listed_tests(row["selected_test_files_to_run"])) in lines[tests]
    for export in env_exports(parsed):
        assert export in lines[:reset]
    assert 'export PYTEST_ADDOPTS="--tb=short -v --continue-on-collection-errors --reruns=3"' in lines
    files = workspace_files(parsed, "diff --git a/x b/x\n")
    assert set(files) == {PATCH_FILE, RUN_SCRIPT, PARSER, EVAL_SCRIPT} and files[RUN_SCRIPT] == row["run_script"]
    for name, text in (("eval.sh", script), ("run_script.sh", row["run_script"])):
        (tmp_path / name).write_text(text)
        checked = subprocess.run(["bash", "-n", str(tmp_path / name)], capture_output=True, text=True, timeout=30)
        assert checked.returncode == 0, (name, checked.stderr)


def run_parser(row: dict, stdout: str, tmp_path: Path) -> dict:
    (tmp_path / "parser.py").write_text(row["parser_script"])
    (tmp_path / "stdout.log").write_text(stdout)
    (tmp_path / "stderr.log").write_text("")
    subprocess.run([sys.executable, str(tmp_path / "parser.py"), str(tmp_path / "stdout.log"),
                    str(tmp_path / "stderr.log"), str(tmp_path / "output.json")], check=True, capture_output=True,
                   timeout=60)
    return json.loads((tmp_path / "output.json").read_text())


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_the_rows_own_parser_and_the_grade(row, tmp_path):
    parsed = SWERow.model_validate(row)
    names = required(row)
    output = run_parser(row, printed_output(row, dict.fromkeys(names, "PASSED")), tmp_path)
    assert grade(output, parsed) == (True, [])
    broken = listed_tests(row["fail_to_pass"])[0]
    output = run_parser(row, printed_output(row, {**dict.fromkeys(names, "PASSED"), broken: "FAILED"}), tmp_path)
    assert grade(output, parsed) == (False, [broken])
    missing = listed_tests(row["pass_to_pass"])[-1]
    output = run_parser(row, printed_output(row, {name: "PASSED" for name in names if name != missing}), tmp_path)
    assert grade(output, parsed) == (False, [missing])


def test_test_lists_as_the_data_set_spells_them():
    assert listed_tests('["a", "b"]') == ["a", "b"]
    assert listed_tests("['a::t[x-1]', \"b\"]") == ["a::t[x-1]", "b"]  # a Python literal, read not run
    assert listed_tests("") == [] and listed_tests(["c"]) == ["c"]
    with pytest.raises(ValueError):
        listed_tests("__import__('os').system('true')")


def test_patch_sections_binary_and_untracked_paths():
    text = ("diff --git a/keep.py b/keep.py\n--- a/keep.py\n+++ b/keep.py\n@@ -1 +1 @@\n-a\n+b\n"
            "diff --git a/logo.png b/logo.png\nBinary files a/logo.png and b/logo.png differ\n"
            "diff --git a/dump.rdb b/dump.rdb\nnew file mode 100644\n--- /dev/null\n+++ b/dump.rdb\n@@ -0,0 +1 @@\n+x\n"
            "diff --git a/gone.py b/gone.py\ndeleted file mode 100644\n--- a/gone.py\n+++ /dev/null\n"
            "@@ -1 +0,0 @@\n-y\n")
    assert "logo.png" not in without_binary_sections(text) and "dump.rdb" in without_binary_sections(text)
    assert [section_path(s) for s in patch_sections(text)] == ["keep.py", "logo.png", "dump.rdb", "gone.py"]
    kept = without_paths(text, {"dump.rdb"})
    assert "dump.rdb" not in kept and "keep.py" in kept and "gone.py" in kept


def test_env_lines_of_both_forms():
    row = SWERow.model_validate({**ROWS[1],
                                 "base_dockerfile": "FROM x\nENV A=1 B=\"two words\"\nENV LEGACY some value\n",
                                 "instance_dockerfile": "RUN true\n  ENV C=3\n"})
    assert env_exports(row) == ['export A=1 B="two words"', "export LEGACY='some value'", "export C=3"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_apply_step_on_a_real_repository(tmp_path):
    """The script's apply function, run by bash on a real git repository: a clean patch, one that
    needs fuzz, and one that does not apply (which leaves the tree untouched)."""
    from gym_compose.server.swe.evaluation import APPLY_FUNCTION

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 21)))
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"], cwd=repo, check=True)
    good = "--- a/f.txt\n+++ b/f.txt\n@@ -9,3 +9,3 @@\n line 9\n-line 10\n+line ten\n line 11\n"
    shifted = good.replace("line 9\n", "line nine\n", 1)  # a context line off: git refuses, patch fuzzes
    bad = good.replace("-line 10", "-line 100")
    function = APPLY_FUNCTION.replace("/workspace/patch.diff", str(tmp_path / "p.diff"))

    def apply(patch: str) -> tuple[int, str]:
        subprocess.run(["git", "checkout", "-q", "--", "."], cwd=repo, check=True)
        (tmp_path / "p.diff").write_text(patch)
        done = subprocess.run(["bash", "-c", f"{function}\napply_candidate"], cwd=repo, capture_output=True,
                              text=True, timeout=60)
        return done.returncode, (repo / "f.txt").read_text()

    assert apply(good) == (0, (repo / "f.txt").read_text().replace("line 10\n", "line ten\n"))
    code, text = apply(shifted)
    assert code == 0 and "line ten" in text
    code, text = apply(bad)
    assert code == 1 and "line ten" not in text and "line 10\n" in text
    assert apply("")[0] == 0
