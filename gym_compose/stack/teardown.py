"""Stopping and removing a stack, however the command ends (done, failed, Ctrl-C, SIGTERM, SIGHUP)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gym_compose.console import say
from gym_compose.engine.targets.deployed_stack import DeployedStack
from gym_compose.errors import GymComposeError
from gym_compose.stack.state import forget_project

STOP_GRACE_SECONDS = 5


@contextmanager
def uninterruptible() -> Iterator[None]:
    """A clean-up that a second Ctrl-C (or SIGTERM, SIGHUP) must not leave half-done; every step
    of it has a timeout, so it ends."""
    if threading.current_thread() is not threading.main_thread():  # e.g. a trainer's actor thread:
        yield  # signal handlers can only be set in the main thread
        return
    stopping = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in stopping}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def stop_and_remove(stack: DeployedStack) -> None:
    """Stop with a grace period, name what had to be killed, remove everything."""
    with uninterruptible():
        try:
            stack.stop(STOP_GRACE_SECONDS)
            killed = [s.service for s in stack.ps() if s.exit_code == 137]
            if killed:
                say(f"killed after {STOP_GRACE_SECONDS}s grace: {', '.join(killed)}")
        except GymComposeError as error:
            say(f"warning: could not stop the stack gracefully: {error}")
        down_quietly(stack)
    say("gym-compose finished")


def down_quietly(stack: DeployedStack) -> None:
    """Remove the stack after a failure: a failed clean-up is reported, never raised over it."""
    from gym_compose.stack.pulled_images import remember_pulled_images

    try:
        with uninterruptible():
            remember_pulled_images(stack)  # for `down --images`: the broker's log goes with it
            stack.down()
    except Exception as error:  # the original failure matters more than a failed clean-up
        say(f"warning: could not remove the stack: {error}; run `gym-compose down -p {stack.name}`")
    else:
        forget_project(stack.name)
