"""The browser side of the viewer's tests: a Chromium fixture and the checks every page must pass.

The same checks run against the live page and the exported file, on synthetic run folders
(tests/protocol/test_view_pages.py) and on run folders a real collection wrote
(tests/e2e/test_view_e2e.py): the metrics, a trajectory and a failure are visible.
"""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from tests.support.view import artifact_path, chromium_executable, in_ci, launch_chromium

LOCAL_SCHEMES = ("file", "blob", "data", "about")
WAIT_MS = 60_000  # generous: the machine may be busy; every wait polls the DOM and ends early


@pytest.fixture(scope="module")
def browser():
    if chromium_executable() is None:
        if in_ci():
            pytest.fail("CI must run the page tests, but there is no Chromium (scripts/setup installs Debian's chromium)")
        pytest.skip("no Chromium (scripts/setup installs Debian's chromium package)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        yield chromium
        chromium.close()


class PageWatch:
    """A page, with every request it made and every script error it raised."""

    def __init__(self, browser, offline: bool = False, allowed_host: str | None = None):
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.page = self.context.new_page()
        self.page.set_default_timeout(WAIT_MS)
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        if offline:  # no network at all: anything that is not the file itself fails
            self.context.route("**/*", lambda route: route.continue_() if urlparse(route.request.url).scheme in LOCAL_SCHEMES else route.abort())
        self.allowed_host = allowed_host

    def external_requests(self) -> list[str]:
        def local(url: str) -> bool:
            parsed = urlparse(url)
            return parsed.scheme in LOCAL_SCHEMES or (self.allowed_host is not None and parsed.netloc == self.allowed_host)
        return [url for url in self.requests if not local(url)]

    def close(self) -> None:
        self.context.close()


def open_page(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready]")


def check_metrics(page, rollouts: str, failed: str) -> None:
    """The metric cards: rollouts done / total and failed rollouts, as `gym-compose up` reported them."""
    expect = _expect()
    expect(page.locator('[data-metric="rollouts"] .value')).to_have_text(rollouts)
    expect(page.locator('[data-metric="failed rollouts"] .value')).to_have_text(failed)
    expect(page.locator('[data-metric="mean reward"] .value')).not_to_have_text("–")
    expect(page.locator("#key-metrics")).to_contain_text("mean/reward")


def check_charts(page) -> None:
    expect = _expect()
    expect(page.locator("#histogram .main-svg").first).to_be_visible()
    expect(page.locator("#passk .main-svg").first).to_be_visible()


def check_trajectory(page, task_prompt: str, tool_name: str) -> None:
    """Open the first rollout of the task with `task_prompt`: the conversation and the verdict show."""
    expect = _expect()
    row = page.locator("#tasks tbody tr", has_text=task_prompt)
    row.locator("button.chip").first.click()
    view = page.locator("#rollout-view")
    expect(view).to_be_visible()
    expect(view.locator(".turn.role-user")).to_contain_text(task_prompt)
    expect(view.locator(".turn.tool-call")).to_contain_text(tool_name)
    expect(view.locator(".turn.tool-output").first).to_be_visible()
    expect(view.locator(".turn.role-assistant").last).to_be_visible()
    expect(view.locator(".verdict")).to_contain_text("reward")


def check_failure(page, message: str) -> None:
    """The failures list names the error; the failed task's rollout shows the error text."""
    expect = _expect()
    expect(page.locator("#failure-groups")).to_contain_text(message)
    page.select_option("#status-filter", "failed")
    failed_chip = page.locator("#tasks tbody button.chip.failed").first
    expect(failed_chip).to_be_visible()
    failed_chip.click()
    view = page.locator("#rollout-view")
    expect(view.locator(".failure .message").first).to_contain_text(message)
    expect(view.locator(".failure").first).to_contain_text("HTTP 422")
    page.select_option("#status-filter", "all")


def screenshot(page, name: str) -> None:
    page.screenshot(path=str(artifact_path(name)), full_page=True)


def _expect():
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    return expect
