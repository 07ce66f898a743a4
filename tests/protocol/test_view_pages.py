"""`gym-compose view` in a real headless Chromium, on synthetic run folders (loopback server).

Every test here asserts on the page's DOM; screenshots go to test-artifacts/ (kept by CI).
"""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import urlparse

import httpx
import pytest

from tests.support.view import FAILURE_MESSAGE, REPO, ServedView, write_synthetic_run
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

pytestmark = pytest.mark.protocol


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return write_synthetic_run(tmp_path_factory.mktemp("view") / "calc-20260101-000000", tasks=8, repeats=4,
                               failed_tasks=(5,), long_output_task=2)


def test_live_page_shows_metrics_charts_a_trajectory_and_a_failure(browser, run_dir):  # noqa: F811
    with ServedView(run_dir) as served:
        watch = PageWatch(browser, allowed_host=urlparse(served.url).netloc)
        page = watch.page
        open_page(page, served.url)
        check_metrics(page, "28 / 32", "4")
        check_charts(page)
        check_trajectory(page, "What is 3 * 4? (task 1)", "calculate")
        check_failure(page, FAILURE_MESSAGE)
        screenshot(page, "view-synthetic-live.png")
        assert watch.errors == []
        assert watch.external_requests() == []
        watch.close()


def test_exported_file_opens_with_no_server_and_no_network(browser, run_dir, tmp_path):  # noqa: F811
    report = tmp_path / "report.html"
    subprocess.run([sys.executable, "-m", "gym_compose", "view", "--export", str(report), str(run_dir)],
                   check=True, capture_output=True, cwd=REPO, timeout=300)
    watch = PageWatch(browser, offline=True)
    page = watch.page
    open_page(page, report.as_uri())
    check_metrics(page, "28 / 32", "4")
    check_charts(page)
    check_trajectory(page, "What is 3 * 4? (task 1)", "calculate")
    check_failure(page, FAILURE_MESSAGE)
    screenshot(page, "view-synthetic-export.png")
    assert watch.errors == []
    assert watch.external_requests() == []
    watch.close()


def test_long_outputs_are_folded(browser, run_dir):  # noqa: F811
    from playwright.sync_api import expect

    with ServedView(run_dir) as served:
        watch = PageWatch(browser)
        page = watch.page
        open_page(page, served.url)
        page.locator("#tasks tbody tr", has_text="(task 2)").locator("button.chip").first.click()
        output = page.locator("#rollout-view .turn.tool-output")
        toggle = output.locator(".fold-toggle")
        expect(toggle).to_contain_text("show all")
        folded = len(output.locator("pre").inner_text())
        toggle.click()
        expect(toggle).to_have_text("fold")
        assert len(output.locator("pre").inner_text()) > folded
        assert "step 399" in output.locator("pre").inner_text()
        watch.close()


def test_new_rollouts_appear_on_reload_and_a_torn_last_line_is_tolerated(browser, tmp_path):  # noqa: F811
    from playwright.sync_api import expect

    folder = write_synthetic_run(tmp_path / "running", tasks=6, repeats=1, finished=False, with_metrics=False)
    lines = (folder / "rollouts.jsonl").read_bytes().splitlines(keepends=True)
    torn = lines[3][: len(lines[3]) // 2]
    (folder / "rollouts.jsonl").write_bytes(b"".join(lines[:3]) + torn)
    with ServedView(folder) as served:
        watch = PageWatch(browser)
        page = watch.page
        open_page(page, served.url)
        expect(page.locator('[data-metric="rollouts"] .value')).to_have_text("3 / 6")
        expect(page.locator("#run-state")).to_contain_text("running")
        expect(page.locator("#metrics-note")).to_contain_text("not written yet")
        expect(page.locator("#tasks tbody tr")).to_have_count(3)
        with (folder / "rollouts.jsonl").open("ab") as f:
            f.write(lines[3][len(torn):] + b"".join(lines[4:]))
        page.reload()
        page.wait_for_selector("body[data-ready]")
        expect(page.locator('[data-metric="rollouts"] .value')).to_have_text("6 / 6")
        expect(page.locator("#tasks tbody tr")).to_have_count(6)
        expect(page.locator("#load-error")).to_be_hidden()
        assert watch.errors == []
        watch.close()


def test_runs_side_by_side_put_the_differing_task_first(browser, tmp_path):  # noqa: F811
    from playwright.sync_api import expect

    a = write_synthetic_run(tmp_path / "model-a", tasks=5, repeats=2)
    b = write_synthetic_run(tmp_path / "model-b", tasks=5, repeats=2, failed_tasks=(3,))
    with ServedView(a, b) as served:
        watch = PageWatch(browser)
        page = watch.page
        open_page(page, served.url)
        page.get_by_role("button", name="Compare runs").click()
        first = page.locator("#compare tbody tr").first
        expect(first).to_contain_text("(task 3)")
        expect(first.locator(".diff-yes")).to_be_visible()
        expect(first.locator("button.chip.failed")).to_have_count(2)
        expect(page.locator("#compare thead")).to_contain_text("model-a")
        expect(page.locator("#compare thead")).to_contain_text("model-b")
        screenshot(page, "view-synthetic-compare.png")
        watch.close()


def test_api_answers_bad_queries_with_400_and_unknown_things_with_404(run_dir):
    with ServedView(run_dir) as served, httpx.Client(base_url=served.url, timeout=30) as client:
        assert client.get("api/runs").json()["runs"][0]["live"]["tasks"] == 8
        page = client.get("api/runs/0/tasks", params={"status": "failed"}).json()
        assert [row["task"] for row in page["data"]] == [5]
        bad = client.get("api/runs/0/tasks", params={"order": "sideways"})
        assert bad.status_code == 400 and "order must be one of" in bad.json()["error"]
        assert client.get("api/runs/7/tasks").status_code == 404
        assert client.get("api/runs/0/rollouts/r9999").status_code == 404
        assert client.get("assets/nothing.js").status_code == 404
        assert client.get("assets/datatables.js").status_code == 200
