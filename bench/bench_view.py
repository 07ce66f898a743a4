"""Time from `gym-compose view RUN_DIR` to the first screen, on a 100,000-rollout run folder.

    .venv/bin/python -m bench.bench_view [--tasks 25000] [--repeats 4] [--runs 3]

Writes a synthetic run folder (--tasks x --repeats rollouts of a calculator-style tool call,
~1.3 KB each, 1 task in 500 failed with HTTP 422, the collector's own aggregate metrics) once,
then --runs times: starts `gym-compose view` as a user does, opens the printed URL in headless
Chromium (Debian's package, via Playwright) and waits for the first screen: the metric cards and
the first page of the task table drawn (the page sets body[data-ready] then). Prints, per run,
seconds until the URL was printed (the server is up; the run is indexed meanwhile, while the
browser loads the page) and until the first screen, then the medians.

Baseline, measured in the same run: one pass of orjson.loads over every line of rollouts.jsonl,
the least that any viewer which reads every rollout must spend; the ratio says what the viewer
adds on top. Also times `--export` of the same folder and prints the file's size.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from tests.support.view import ServedView, launch_chromium, write_synthetic_run

REPO = Path(__file__).resolve().parents[1]

def parse_baseline(path: Path) -> float:
    started = time.perf_counter()
    with path.open("rb") as f:
        for line in f:
            orjson.loads(line)
    return time.perf_counter() - started


def first_screen(browser, folder: Path) -> tuple[float, float, float]:
    started = time.perf_counter()
    with ServedView(folder) as served:
        printed = time.perf_counter() - started
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(served.url)
        page.wait_for_selector("body[data-ready]", timeout=120_000)
        ready = time.perf_counter() - started
        rows = page.locator("#tasks tbody tr").count()
        if rows < 10:
            raise SystemExit(f"the first screen shows {rows} task rows, expected a full page")
        page.close()
    indexed = re.search(r"indexed in ([\d.]+)s", served.process.stderr.read())
    return printed, ready, float(indexed.group(1)) if indexed else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=25_000)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="bench-view-"))
    folder = work / "run-100k"
    started = time.perf_counter()
    write_synthetic_run(folder, args.tasks, args.repeats, failed_tasks=tuple(range(5, args.tasks, 500)))
    rollouts = folder / "rollouts.jsonl"
    size_mb = rollouts.stat().st_size / 1e6
    print(f"run folder: {args.tasks * args.repeats} rollouts, rollouts.jsonl {size_mb:.0f} MB "
          f"(written in {time.perf_counter() - started:.0f}s)")

    baselines, printed, ready, indexing = [], [], [], []
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        for run in range(args.runs):
            baselines.append(parse_baseline(rollouts))
            p, r, i = first_screen(browser, folder)
            printed.append(p)
            ready.append(r)
            indexing.append(i)
            print(f"run {run + 1}: URL printed after {p:.2f}s, first screen after {r:.2f}s, server indexing "
                  f"{i:.1f}s (baseline parse {baselines[-1]:.2f}s)")
        browser.close()
    median_ready, median_base = statistics.median(ready), statistics.median(baselines)
    print(f"median: URL {statistics.median(printed):.2f}s, server indexing {statistics.median(indexing):.1f}s, first screen {median_ready:.2f}s "
          f"(target < 3 s); baseline parse {median_base:.2f}s; first screen / baseline = {median_ready / median_base:.2f}")

    output = work / "report.html"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gym_compose", "view", "--export", str(output), str(folder)],
                   check=True, capture_output=True, cwd=REPO)
    print(f"export: {time.perf_counter() - started:.2f}s, {output.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
