"""Shared test set-up: markers decide which tests need loopback servers or Docker; under CI
nothing skips."""

import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

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


# Under pytest-xdist (pyproject's addopts: four workers) the Docker tests run in three lanes, each a
# worker running its modules whole, while the unit and protocol tests fill the fourth. A module
# stays whole in its lane (its module fixtures: a stack, a registry). The lanes share one engine.
# What must not happen while another lane's stack is up waits for the other lanes to have run their
# last Docker module (`after_the_other_lanes`, run when the session ends, outside any test's
# timeout): leaving a swarm takes name resolution from every network on the engine (a second lane's
# stack answered "Name or service not known"; tests/e2e/conftest.py's swarm_manager).
# LANES names the modules of the second and third lanes in the order they run; the first lane runs
# every other Docker module in file order. They are balanced by the seconds each module took on an
# empty engine and with the images kept (2026-12-06, docs/development.md#tests): the second lane
# holds the NeMo Gym-runtime modules whose first (test_judge_models, 369-624 s empty, 77 s kept)
# builds the runtime image, then the swarm modules, which mostly wait (on Swarm's scheduler and a
# lost node's heartbeats: until 2026-12-06 they ran alone at the end, the machine nearly idle); the
# third starts with the local model and the SWE registry (whose first test builds swebench_mini's
# task images), and runs NeMo Gym-runtime modules after them, when the image is built (a module
# that asks for an image being built waits for it: gym-compose's build lock), then test_faults,
# which the first lane, the longest with images kept, gave up.
LANES = {
    "docker-2": ("test_judge_models", "test_mcp", "test_nemo_gym_agents", "test_nemo_gym_runtime",
                 "test_nemo_gym_sandboxes", "test_nemo_gym_swe_servers", "test_swarm", "test_swarm_nodes"),
    "docker-3": ("test_local_model", "test_swe_registry", "test_swebench", "test_nemo_gym_compat",
                 "test_nemo_gym_sweep", "test_faults"),
}
FIRST_LANE = "docker-1"
_LANE_OF = {module: lane for lane, modules in LANES.items() for module in modules}
_PLACE_IN_LANE = {module: place for modules in LANES.values() for place, module in enumerate(modules)}


def _module_name(item) -> str:
    return Path(str(item.fspath)).stem


def pytest_itemcollected(item):
    """Each Docker test's lane, as it is collected: before any pytest_collection_modifyitems (xdist's
    reads the groups there, in an order no hookimpl option pins against a conftest's)."""
    if "docker" in item.keywords:
        item.add_marker(pytest.mark.xdist_group(_LANE_OF.get(_module_name(item), FIRST_LANE)))


class LaneHolds:
    """Which lanes still have Docker modules to run: each lane's worker holds a shared lock on its
    lane's file from its first Docker module until its last one is done, or until its process ends
    (a run stopped by -x or a crash), so a wait for the other lanes never outlives them."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.last_module: dict[str, str] = {}  # lane -> its last Docker module to run
        self.held: dict[str, Any] = {}  # lane -> its open lock file, while this process runs that lane

    def learn(self, items) -> None:
        for item in items:
            if "docker" in item.keywords:
                module = _module_name(item)
                self.last_module[_lane_of(module)] = module

    def started(self, module: str) -> None:
        lane = _lane_of(module)
        if lane not in self.held and self.last_module.get(lane):
            self.held[lane] = open(self.folder / f"lane-{lane}.lock", "w")
            fcntl.flock(self.held[lane], fcntl.LOCK_SH)

    def finished(self, module: str) -> None:
        lane = _lane_of(module)
        if self.last_module.get(lane) == module and lane in self.held:
            self.held.pop(lane).close()  # closing gives the lock back

    def wait_for_the_other_lanes(self) -> None:
        """Until every lane not running in this process has run its last Docker module; a lane that
        has not started yet is not waited for (what it starts comes after the caller's action)."""
        for lane in sorted(set(self.last_module) - set(self.held)):
            with open(self.folder / f"lane-{lane}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # granted once no worker holds that lane


def _lane_of(module: str) -> str:
    return _LANE_OF.get(module, FIRST_LANE)


def _tests_folder(rootpath: Path) -> Path:
    checkout = hashlib.sha256(str(rootpath).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"gym-compose-tests-{checkout}"


@functools.cache
def _lane_holds(rootpath: Path) -> LaneHolds:
    return LaneHolds(_tests_folder(rootpath))


_AFTER_THE_OTHER_LANES: list[Callable[[], None]] = []


def after_the_other_lanes(action: Callable[[], None]) -> None:
    """Run `action` when this process's session ends, once every other lane has run its last Docker
    module: for a clean-up that would break the stacks other lanes have up."""
    _AFTER_THE_OTHER_LANES.append(action)


def pytest_collection_finish(session):
    """The lanes' last modules, from the items that will run (after -k, -m and --deselect)."""
    _lane_holds(session.config.rootpath).learn(session.items)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A Docker module's lane is held from its first test's set-up to its last one's teardown."""
    docker = "docker" in item.keywords
    lanes = _lane_holds(item.config.rootpath)
    if docker:
        lanes.started(_module_name(item))
    started = time.time()
    yield
    if docker and (nextitem is None or nextitem.fspath != item.fspath):
        lanes.finished(_module_name(item))
    _record_lane_time(item, started)


# LANE_TIMES=FILE: each test's worker, module, start and end (seconds from the session's start)
# appended to FILE, for balancing LANES (summary: `python -m tests.support.lane_times FILE`).
# Suites this one starts in a copy of this file record nothing: their rootpath is not its parent.
_SESSION_START = float(os.environ.setdefault("LANE_TIMES_EPOCH", str(time.time())))  # workers inherit it


def _record_lane_time(item, started: float) -> None:
    path = os.environ.get("LANE_TIMES")
    if not path or Path(item.config.rootpath) != Path(__file__).resolve().parents[1]:
        return
    record = {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "module": _module_name(item),
              "start": round(started - _SESSION_START, 2), "end": round(time.time() - _SESSION_START, 2)}
    with open(path, "a") as sink:
        sink.write(json.dumps(record) + "\n")


def pytest_sessionfinish(session):
    if _AFTER_THE_OTHER_LANES:
        _lane_holds(session.config.rootpath).wait_for_the_other_lanes()
    while _AFTER_THE_OTHER_LANES:
        _AFTER_THE_OTHER_LANES.pop(0)()


def _place_in_lane(item) -> int:
    """Sort key: a named lane in LANES order; stable, so file order otherwise (xdist keeps this
    order within a lane)."""
    return _PLACE_IN_LANE.get(_module_name(item), 0)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_place_in_lane)
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
