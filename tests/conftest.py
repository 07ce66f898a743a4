"""Shared test set-up: markers decide which tests need loopback servers or Docker; under CI
nothing skips."""

import os
import shutil
import subprocess

import pytest


def in_ci() -> bool:
    """CI sets CI=true: there every prerequisite must be present, so a skip is a failure."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _docker_compose_available() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        subprocess.run(["docker", "compose", "version"], check=True, capture_output=True, timeout=20)
        subprocess.run(["docker", "info"], check=True, capture_output=True, timeout=20)
    except (subprocess.SubprocessError, OSError):
        return False
    return True


# Under pytest-xdist (pyproject's addopts: two workers) every Docker test runs in one lane, one
# worker running them in file order, while the unit and protocol tests fill the other worker. One
# lane, not two: the Docker tests share one engine, and those that change it (swarm mode and further
# engines, removed images, a registry on loopback) break what another test runs meanwhile (a second
# lane's stack lost its service names while the swarm-nodes test ran: "Name or service not known").
ENGINE_LANE = pytest.mark.xdist_group("docker-engine")


def pytest_itemcollected(item):
    """Each Docker test's lane, as it is collected: before any pytest_collection_modifyitems (xdist's
    reads the groups there, in an order no hookimpl option pins against a conftest's)."""
    if "docker" in item.keywords:
        item.add_marker(ENGINE_LANE)


def pytest_collection_modifyitems(config, items):
    docker_items = [item for item in items if "docker" in item.keywords]
    if not docker_items or _docker_compose_available():
        return
    if in_ci():
        raise pytest.UsageError("CI must run the Docker tests, but no Docker engine with Compose v2 answers")
    skip = pytest.mark.skip(reason="no Docker engine with Compose v2 (run scripts/setup)")
    for item in docker_items:
        item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_search_path_from_the_environment(monkeypatch):
    """Tests see only the search roots they set up, never the developer's GYM_COMPOSE_SEARCH_PATH."""
    monkeypatch.delenv("GYM_COMPOSE_SEARCH_PATH", raising=False)


def _fail_a_skip_in_ci(report) -> None:
    if report.skipped and not hasattr(report, "wasxfail") and in_ci():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"under CI=true no test may skip for a missing prerequisite, but it skipped: {reason} "
                           "(scripts/setup installs every prerequisite)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_a_skip_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_a_skip_in_ci(outcome.get_result())


@pytest.fixture(scope="module")
def nemo_gym_checkout():
    """NeMo Gym 0.7.0's released tree (its resources servers, configs, rows): tests/support/nemo_gym.py."""
    from tests.support.nemo_gym import unpacked_nemo_gym  # here: this file also runs alone (test_ci_no_skips)

    return unpacked_nemo_gym()
