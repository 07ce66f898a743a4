"""Write this benchmark's rows: data/example_single_tool_call_benchmark.jsonl.

The rows come from the example_single_tool_call resources server's own examples, one benchmark
task per row, unchanged. `gym-compose eval
prepare --benchmark example_single_tool_call` runs this script from the root it was found under;
it reads and writes relative to its own folder, so the working directory does not matter.
"""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parents[1] / "server_images" / "example_single_tool_call" / "data" / "example.jsonl"
OUTPUT = HERE / "data" / "example_single_tool_call_benchmark.jsonl"


def prepare() -> Path:
    rows = [json.loads(line) for line in SOURCE.read_text(encoding="utf-8").splitlines() if line.strip()]
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUTPUT.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    tmp.replace(OUTPUT)
    print(f"wrote {len(rows)} rows to {OUTPUT}")
    return OUTPUT


if __name__ == "__main__":
    prepare()
