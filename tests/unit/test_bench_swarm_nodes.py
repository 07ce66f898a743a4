"""The swarm-nodes scenario (bench/bench_swarm_nodes.py) on a shared machine: a second scenario waits
for the first instead of sharing (and at its end removing) the first one's nodes and stack."""

import subprocess
import sys
import threading
import time

from bench import bench_swarm_nodes as scenario

HOLD = """
import fcntl, sys
with open(sys.argv[1], "w") as handle:
    fcntl.flock(handle, fcntl.LOCK_EX)
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_second_scenario_waits_until_the_first_one_ends(tmp_path, capsys):
    lock = tmp_path / "scenario.lock"
    first = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "held"
        inside = threading.Event()

        def second() -> None:
            with scenario.one_scenario_at_a_time(lock, time.monotonic()):
                inside.set()

        waiter = threading.Thread(target=second, daemon=True)
        waiter.start()
        deadline = time.monotonic() + 30
        while "waiting for the swarm-nodes scenario" not in capsys.readouterr().out:
            assert time.monotonic() < deadline, "the second scenario never said it waits"
            time.sleep(0.05)
        assert not inside.is_set()  # it says so, and it does wait
        first.communicate("\n", timeout=30)  # the first scenario ends
        assert inside.wait(timeout=30)
        waiter.join(timeout=30)
    finally:
        first.kill()
        first.wait(timeout=30)


def test_a_lone_scenario_starts_at_once(tmp_path, capsys):
    with scenario.one_scenario_at_a_time(tmp_path / "scenario.lock", time.monotonic()):
        pass
    assert "waiting" not in capsys.readouterr().out
