"""An interrupt (Ctrl-C, SIGTERM, SIGHUP) never lands inside a wait on a process (gym_compose/interrupts.py).

CI, 2026-12-07: a CLI stopped by SIGHUP hung for good in DockerProcess.stop. The interrupt had
landed in `Popen.wait` between its lock's acquire and the `try` that releases it, and the next
wait without a timeout blocked on that lock. Here the interrupt is made to land exactly there."""

from __future__ import annotations

import subprocess
import threading

import pytest

from gym_compose import interrupts
from gym_compose.engine.docker_cli import DockerProcess


def test_an_interrupt_outside_a_deferred_block_is_raised_at_once():
    with pytest.raises(KeyboardInterrupt):
        interrupts.interrupt()


def test_an_interrupt_inside_is_raised_when_the_outermost_block_ends():
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.deferred():
            with interrupts.deferred():
                interrupts.interrupt()
                reached.append("inner")
            reached.append("outer")  # the inner block's end does not raise: the outer one's does
    assert reached == ["inner", "outer"]
    with interrupts.deferred():  # nothing left over for the next block
        pass


class InterruptRightAfterAcquire:
    """Popen's wait lock, with the interrupt arriving the moment it is first taken."""

    def __init__(self, lock):
        self.lock, self.fired = lock, False

    def acquire(self, *args, **kwargs):
        taken = self.lock.acquire(*args, **kwargs)
        if taken and not self.fired:
            self.fired = True
            interrupts.interrupt()
        return taken

    def release(self):
        self.lock.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


def test_an_interrupt_in_a_wait_is_raised_after_it_and_stop_still_ends():
    popen = subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    process = DockerProcess(popen, ["sleep", "30"], None)
    real_lock = popen._waitpid_lock
    popen._waitpid_lock = InterruptRightAfterAcquire(real_lock)
    try:
        with pytest.raises(KeyboardInterrupt):
            process.wait(0.2)
        assert real_lock.acquire(False), "the interrupt left Popen's wait lock taken"
        real_lock.release()
        stopped: list[int] = []
        stopper = threading.Thread(target=lambda: stopped.append(process.stop(1)), daemon=True)
        stopper.start()
        stopper.join(timeout=30)
        assert stopped, "stop() did not end"
        assert stopped[0] < 0  # it took a signal
    finally:
        popen.kill()
