"""`gym-compose eval prepare`: runs each selected benchmark's prepare_script from its root."""

import shutil
from pathlib import Path

from tests.support.cli import REPO, run_cli

BENCHMARK = "example_single_tool_call"
QUIZ_CONFIG = """\
config_paths:
  - server_images/example_single_tool_call/configs/example_single_tool_call.yaml
example_single_tool_call_simple_agent:
  responses_api_agents:
    simple_agent:
      datasets:
      - {name: quiz, type: benchmark, jsonl_fpath: benchmarks/quiz/data/quiz.jsonl,
         prepare_script: benchmarks/quiz/prepare.py}
"""
QUIZ_PREPARE = """\
import json, pathlib
rows = [{"responses_create_params": {"input": f"question {n}"}} for n in range(3)]
out = pathlib.Path("benchmarks/quiz/data/quiz.jsonl")  # relative: the script runs from its root
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text("".join(json.dumps(row) + "\\n" for row in rows))
"""


def test_the_projects_benchmark_prepares_the_rows_it_ships(tmp_path):
    root = tmp_path / "root"
    shutil.copytree(REPO / "benchmarks" / BENCHMARK, root / "benchmarks" / BENCHMARK,
                    ignore=shutil.ignore_patterns("data", "__pycache__"))
    shutil.copytree(REPO / "server_images" / BENCHMARK, root / "server_images" / BENCHMARK,
                    ignore=shutil.ignore_patterns("__pycache__"))
    prepared = run_cli("eval", "prepare", "--search-dir", str(root), "--benchmark", BENCHMARK, cwd=tmp_path)
    assert prepared.returncode == 0, prepared.stderr
    assert f"preparing: python {root / 'benchmarks' / BENCHMARK / 'prepare.py'} (in {root})" in prepared.stderr
    written = root / "benchmarks" / BENCHMARK / "data" / f"{BENCHMARK}_benchmark.jsonl"
    assert written.read_text() == (REPO / "benchmarks" / BENCHMARK / "data" / written.name).read_text()


def quiz(root: Path) -> Path:
    folder = root / "benchmarks" / "quiz"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(QUIZ_CONFIG)
    (folder / "prepare.py").write_text(QUIZ_PREPARE)
    return folder


def test_a_run_asks_for_prepare_and_after_it_finds_the_rows(tmp_path):
    folder = quiz(tmp_path)
    args = ("--search-dir", str(tmp_path), "--benchmark", "quiz")
    before = run_cli("eval", "run", *args, cwd=tmp_path)
    assert before.returncode == 2 and "prepare it first: gym-compose eval prepare" in before.stderr, before.stderr

    prepared = run_cli("eval", "prepare", *args, cwd=tmp_path / "benchmarks")  # any working directory
    assert prepared.returncode == 0, prepared.stderr
    assert len((folder / "data" / "quiz.jsonl").read_text().splitlines()) == 3
    after = run_cli("eval", "run", *args, cwd=tmp_path)
    # the rows pass every check now: the command gets as far as Docker, which this test's PATH lacks
    assert "prepare it first" not in after.stderr and "`docker` command was not found" in after.stderr, after.stderr


def test_a_failing_prepare_script_is_an_error_naming_it(tmp_path):
    folder = quiz(tmp_path)
    (folder / "prepare.py").write_text("import sys\nsys.exit('the source is unreachable')\n")
    result = run_cli("eval", "prepare", "--search-dir", str(tmp_path), "--benchmark", "quiz", cwd=tmp_path)
    assert result.returncode == 1
    assert "the source is unreachable" in result.stderr
    assert f"error: {folder / 'prepare.py'} exited with 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_config_without_a_prepare_script_says_what_to_select(tmp_path):
    result = run_cli("eval", "prepare", "--resources-server", BENCHMARK, cwd=tmp_path)
    assert result.returncode == 2
    assert "no benchmark dataset of this config has a prepare_script" in result.stderr
