"""The shipped benchmarks: `gym-compose list` counts their rows, a folder without config.yaml is
no benchmark, subsets are spread over their sets, and blackjack's rows are reproduced exactly by
its prepare.py (the others fetch from PyPI, which a unit test does not reach)."""

import json
import subprocess
import sys
from pathlib import Path

from gym_compose.cli.benchmark_rows import NOT_PREPARED, benchmark_rows, count_lines
from gym_compose.config import discover

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from prepare_support import spread  # noqa: E402


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_rows_are_counted_from_the_benchmark_file_itself(tmp_path):
    write(tmp_path / "benchmarks/b/data/rows.jsonl", '{"a": 1}\n{"a": 2}\n{"a": 3}')  # no final newline
    config = write(tmp_path / "benchmarks/b/config.yaml", """
agent:
  responses_api_agents:
    simple_agent:
      datasets:
      - {name: b, type: benchmark, jsonl_fpath: benchmarks/b/data/rows.jsonl}
      - {name: e, type: example, jsonl_fpath: missing.jsonl}
""")
    full = write(tmp_path / "benchmarks/b/full.yaml", """
agent:
  responses_api_agents:
    simple_agent:
      datasets: [{name: b, type: benchmark, jsonl_fpath: benchmarks/b/data/all.jsonl, prepare_script: p.py}]
""")
    write(tmp_path / "benchmarks/prompts/math.yaml", "user: '{question}'\n")
    assert benchmark_rows(config, [tmp_path]) == "3" and count_lines(tmp_path / "benchmarks/b/data/rows.jsonl") == 3
    assert benchmark_rows(full, [tmp_path]) == NOT_PREPARED
    listed = {component.selector for component in discover([tmp_path]) if component.kind == "benchmark"}
    assert listed == {"b", "b/full"}  # benchmarks/prompts/ holds no config.yaml: not a benchmark


def test_gym_compose_list_shows_every_shipped_benchmark_with_its_rows():
    listing = subprocess.run([sys.executable, "-m", "gym_compose", "list"], capture_output=True, text=True,
                             cwd=REPO, timeout=120)
    rows = {line.split()[1]: line.split()[2] for line in listing.stdout.splitlines() if line.startswith("--benchmark")}
    assert {name: rows.get(name) for name in ("gsm8k", "math-500", "human_eval", "blackjack")} == {
        "gsm8k": "30", "math-500": "30", "human_eval": "24", "blackjack": "24"}
    assert rows["blackjack/full"] == "200" and rows["example_single_tool_call"] == "5"


def test_a_subset_is_spread_over_the_whole_set():
    assert spread(list(range(10)), 4) == [0, 2, 5, 7]
    assert spread(list(range(3)), 5) == [0, 1, 2]


def test_blackjack_prepare_reproduces_the_shipped_rows(tmp_path):
    for flags, shipped in (([], "blackjack_benchmark.jsonl"), (["--subset"], "blackjack_subset.jsonl")):
        output = tmp_path / shipped
        done = subprocess.run([sys.executable, str(REPO / "benchmarks/blackjack/prepare.py"), *flags,
                               "--output", str(output)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert output.read_bytes() == (REPO / "benchmarks/blackjack/data" / shipped).read_bytes()


def test_shipped_rows_carry_what_their_servers_need():
    for name, fields in {"gsm8k": ("question", "expected_answer"), "math-500": ("question", "expected_answer"),
                         "human_eval": ("task_id", "prompt", "entry_point", "test", "canonical_solution"),
                         "blackjack": ("seed", "expected_actions", "wrong_actions")}.items():
        lines = (REPO / "benchmarks" / name / "data" / f"{name}_subset.jsonl").read_text().splitlines()
        assert len(lines) >= 24
        for line in lines:
            row = json.loads(line)
            assert all(row.get(field) not in (None, "") for field in fields), (name, row)
