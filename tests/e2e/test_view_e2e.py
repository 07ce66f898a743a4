"""`gym-compose view` on a run folder that a real collection wrote (marked `docker`).

One collection through the containers (calculator + the mock model, 2 repeats): two rows the
mock model answers wrongly (`gym_mock_mode: adversary`), one row the environment server rejects
(422), so the run has rewards of 0 and 1, pass@k and failures. Then the served page and the
exported file are opened in headless Chromium; screenshots go to test-artifacts/.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.e2e import free_port, gym_compose, remove_project
from tests.support.view import REPO, ServedView
from tests.support.view_browser import (
    PageWatch,
    browser,  # noqa: F401 (fixture)
    check_charts,
    check_failure,
    check_metrics,
    check_trajectory,
    open_page,
    screenshot,
)

pytestmark = pytest.mark.docker

CALCULATOR_ROWS = REPO / "server_images/calculator/data/example.jsonl"
REJECTED = "answered 422"


@pytest.fixture(scope="module")
def collected_run(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("view-e2e")
    rows = [json.loads(line) for line in CALCULATOR_ROWS.read_text().splitlines() if line.strip()]
    for i in (1, 3):
        rows[i]["responses_create_params"]["metadata"] = {"gym_mock_mode": "adversary"}
    rejected = json.loads(json.dumps(rows[0]))
    rejected["responses_create_params"]["input"] = 5  # not a list of messages: the server answers 422
    rows.append(rejected)
    (work / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    project = f"{PROJECT_PREFIX}-view"
    try:
        up = gym_compose("up", "--resources-server", "calculator", "--input", "rows.jsonl", "--num-repeats", "2",
                         "--run-name", "viewed", "-p", project, "--head-port", str(free_port()), cwd=work)
    finally:
        remove_project(project)
    assert up.returncode == 1, up.stderr  # some rollouts failed
    (run_dir,) = (work / "results").iterdir()
    return run_dir


def run_checks(page) -> None:
    check_metrics(page, "10 / 12", "2")
    check_charts(page)
    check_trajectory(page, "What is 12 * 7?", "calculate")  # a row the mock answers by calling the tool
    check_failure(page, REJECTED)


def test_served_page_shows_the_collected_run(browser, collected_run):  # noqa: F811
    with ServedView(collected_run) as served:
        watch = PageWatch(browser, allowed_host=urlparse(served.url).netloc)
        open_page(watch.page, served.url)
        run_checks(watch.page)
        from playwright.sync_api import expect

        expect(watch.page.locator("#manifest-body")).to_contain_text("mock_model")
        screenshot(watch.page, "view-e2e-live.png")
        assert watch.errors == [] and watch.external_requests() == []
        watch.close()


def test_exported_report_of_the_collected_run_opens_offline(browser, collected_run, tmp_path):  # noqa: F811
    report = tmp_path / "report.html"
    export = gym_compose("view", "--export", str(report), str(collected_run), cwd=tmp_path)
    assert export.returncode == 0, export.stderr
    watch = PageWatch(browser, offline=True)
    open_page(watch.page, report.as_uri())
    run_checks(watch.page)
    screenshot(watch.page, "view-e2e-export.png")
    assert watch.errors == [] and watch.external_requests() == []
    watch.close()
