"""The CLI's signal handlers: SIGUSR1 shows where a command that seems stuck is, and it goes on."""

from __future__ import annotations

import signal
import subprocess
import sys

from tests.support.cli import REPO

STUCK = """
import signal, sys, threading, time
from gym_compose.cli.main import install_signal_handlers

def waiting_in_a_helper_thread():
    time.sleep(30)

install_signal_handlers()
threading.Thread(target=waiting_in_a_helper_thread, daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()  # the "stuck" main thread, until the test lets it go
print("went on", flush=True)
"""


def test_sigusr1_prints_every_threads_stack_and_the_command_goes_on():
    command = subprocess.Popen([sys.executable, "-c", STUCK], cwd=REPO, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert command.stdout.readline().strip() == "ready"
        # faulthandler writes the dump from the signal handler itself, which interrupts the blocked
        # read: it is out before the line below reaches the process
        command.send_signal(signal.SIGUSR1)
        out, dump = command.communicate("\n", timeout=30)
    finally:
        command.kill()
    assert "waiting_in_a_helper_thread" in dump and "<string>" in dump, dump
    assert out.strip() == "went on" and command.returncode == 0, (out, dump)
