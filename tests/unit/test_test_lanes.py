"""The suite's lanes (tests/conftest.py): under pytest-xdist the Docker tests run in three lanes,
each in one worker of its own and in its named order, and a clean-up that would break other lanes'
stacks (leaving a swarm) waits for them to be done. Checked on a small suite of its own, because a
pytest or pytest-xdist upgrade can silently drop the groups (pytest 9.2 did)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
TESTS = '''
import pytest

pytestmark = pytest.mark.docker

@pytest.mark.parametrize("n", range(4))
def test_one(n):
    pass
'''
REPORTED = re.compile(r"\[(gw\d+)\] (?:\[ *\d+%\] )?(?:PASSED|SKIPPED) (\S+?)::test_\w+(?:\[\d\])?@(\S+)")


def run_suite(folder: Path, modules: dict[str, str], *options: str) -> subprocess.CompletedProcess:
    shutil.copyfile(CONFTEST, folder / "conftest.py")
    (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    docker: needs Docker\n")
    for module, text in modules.items():
        (folder / module).write_text(text)
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    env["LANES_RECORD"] = str(folder)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-n", "4",
                           "--dist", "loadgroup", *options, str(folder)],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return done


def test_the_docker_tests_run_in_three_lanes_each_in_one_worker(tmp_path):
    modules = ("test_stack.py", "test_swarm.py", "test_nemo_gym_runtime.py", "test_mcp.py", "test_local_model.py")
    done = run_suite(tmp_path, {module: TESTS for module in modules})
    reported = REPORTED.findall(done.stdout)
    assert len(reported) == 20, done.stdout[-3000:]
    workers: dict[str, set[str]] = {}
    lanes: dict[str, set[str]] = {}
    for worker, module, lane in reported:
        workers.setdefault(lane, set()).add(worker)
        lanes.setdefault(lane, set()).add(module)
    assert lanes == {"docker-1": {"test_stack.py"},
                     "docker-2": {"test_nemo_gym_runtime.py", "test_mcp.py", "test_swarm.py"},
                     "docker-3": {"test_local_model.py"}}, lanes
    assert all(len(held) == 1 for held in workers.values()), workers
    assert len(set().union(*workers.values())) == 3, workers  # the three lanes run at once


def test_a_named_lane_runs_its_modules_in_its_own_order_not_file_order(tmp_path):
    from tests.conftest import LANES

    # a pair of one lane that file order would run the other way round
    lane, first, later = next((lane, first, later) for lane, modules in LANES.items()
                              for place, first in enumerate(modules) for later in modules[place + 1:] if later < first)
    done = run_suite(tmp_path, {f"{first}.py": TESTS, f"{later}.py": TESTS})
    order = [module for _worker, module, in_lane in REPORTED.findall(done.stdout) if in_lane == lane]
    assert order == [f"{first}.py"] * 4 + [f"{later}.py"] * 4, done.stdout[-3000:]


def test_the_named_lanes_hold_existing_modules_once_and_the_nemo_gym_runtime_users_after_no_build():
    from tests.conftest import LANES

    e2e = CONFTEST.parent / "e2e"
    named = [module for modules in LANES.values() for module in modules]
    assert len(named) == len(set(named))
    assert all((e2e / f"{module}.py").is_file() for module in named), named
    # The runtime image is built by the second lane's first module; a user of it anywhere else
    # would sit in the first lane at the start, waiting for that build.
    users = {path.stem for path in e2e.glob("test_*.py") if "BUILDS_NEMO_GYM_RUNTIME]" in path.read_text()}
    assert LANES["docker-2"][0] in users
    assert users <= set(LANES["docker-2"]) | set(LANES["docker-3"][1:]), users - set(named)


# test_a (the first lane) waits for the second lane to have started, registers a clean-up for after
# the other lanes and ends while that lane is still in its first module (it waits for test_a's end,
# then lingers): the clean-up must wait until the lane has run its last module too, not just the
# module it was in. (A lane that has not started yet is not waited for: what it starts comes after.)
SPAN = '''
import json, os, time
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker
HERE = Path(os.environ["LANES_RECORD"])

def test_span():
    began = time.monotonic()
    (HERE / "{name}.started").write_text("")
    deadline = began + 10
    while {wait_for_a} and not (HERE / "a.done").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep({linger})
    with open(HERE / "spans.jsonl", "a") as out:
        out.write(json.dumps({{"module": "{name}", "began": began, "ended": time.monotonic()}}) + "\\n")
'''
CLEAN_UP = '''
import json, os, time
from pathlib import Path

import pytest
from conftest import after_the_other_lanes

pytestmark = pytest.mark.docker
HERE = Path(os.environ["LANES_RECORD"])

def clean_up():
    now = time.monotonic()
    with open(HERE / "spans.jsonl", "a") as out:
        out.write(json.dumps({{"module": "clean-up", "began": now, "ended": now}}) + "\\n")

def test_a():
    deadline = time.monotonic() + 10
    while {wait} and not (HERE / "{first}.started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    after_the_other_lanes(clean_up)
    now = time.monotonic()
    with open(HERE / "spans.jsonl", "a") as out:
        out.write(json.dumps({{"module": "test_a", "began": now, "ended": now}}) + "\\n")
    (HERE / "a.done").write_text("")
'''


def spans_of(folder: Path) -> dict[str, dict]:
    return {span["module"]: span for span in map(json.loads, (folder / "spans.jsonl").read_text().splitlines())}


def test_a_clean_up_after_the_other_lanes_waits_for_their_last_module_not_just_their_current_one(tmp_path):
    from tests.conftest import LANES

    first, second = LANES["docker-2"][:2]
    run_suite(tmp_path, {"test_a.py": CLEAN_UP.format(first=first, wait=True),
                         f"{first}.py": SPAN.format(name=first, wait_for_a=True, linger=1.0),
                         f"{second}.py": SPAN.format(name=second, wait_for_a=False, linger=0.5)})
    spans = spans_of(tmp_path)
    assert spans["test_a"]["ended"] <= spans[first]["ended"], spans  # the second lane was mid-module then
    assert spans["clean-up"]["began"] >= spans[second]["ended"], spans


def test_a_lane_whose_modules_are_all_deselected_is_not_waited_for(tmp_path):
    from tests.conftest import LANES

    first = LANES["docker-2"][0]
    done = run_suite(tmp_path, {"test_a.py": CLEAN_UP.format(first=first, wait=False), f"{first}.py": TESTS,
                              "test_z.py": TESTS}, "-k", f"not {first}")  # run_suite's own timeout fails a clean-up that waits for it
    order = [module for _worker, module, lane in REPORTED.findall(done.stdout)]
    assert sorted(set(order)) == ["test_a.py", "test_z.py"], done.stdout[-3000:]
    assert "clean-up" in spans_of(tmp_path)
