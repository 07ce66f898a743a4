"""The CLI's signal handlers: SIGUSR1 shows where a command that seems stuck is, and it goes on; the
end-to-end tests' runner of the CLI uses it to say where a command that outlived its timeout was."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest

from tests.support.cli import REPO
from tests.support.e2e import free_port, gym_compose

STUCK = """
import sys, threading
from gym_compose.cli.main import install_signal_handlers

inside = threading.Event()

def waiting_in_a_helper_thread():
    inside.set()
    threading.Event().wait(30)

install_signal_handlers()
threading.Thread(target=waiting_in_a_helper_thread, daemon=True).start()
inside.wait(30)
print("ready", flush=True)
sys.stdin.readline()  # the "stuck" main thread, until the test lets it go
print("went on", flush=True)
"""


def test_sigusr1_prints_every_threads_stack_and_the_command_goes_on():
    command = subprocess.Popen([sys.executable, "-c", STUCK], cwd=REPO, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dump = b""
    try:
        assert command.stdout.readline().strip() == b"ready"
        command.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while not (b"in waiting_in_a_helper_thread" in dump and b"in <module>" in dump):  # both threads
            assert time.monotonic() < deadline, dump
            if select.select([command.stderr], [], [], 0.5)[0]:
                dump += os.read(command.stderr.fileno(), 65536)  # unbuffered: communicate() reads the rest
        out, rest = command.communicate(b"\n", timeout=30)
    finally:
        command.kill()
    assert b"in waiting_in_a_helper_thread" in dump and b'File "<string>"' in dump, dump
    assert out.strip() == b"went on" and command.returncode == 0, (out, dump + rest)


def test_a_command_past_its_timeout_fails_the_test_with_where_its_threads_were(tmp_path):
    # `view` serves until stopped: a command that does not end by itself
    (tmp_path / "progress.json").write_text('{"done": 0}')
    with pytest.raises(AssertionError) as failure:
        gym_compose("view", str(tmp_path), "--port", str(free_port()), cwd=tmp_path, timeout=5)
    report = str(failure.value)
    assert report.startswith("`gym-compose view` did not exit within 5 s")
    assert "(most recent call first)" in report and "gym_compose/cli/main.py" in report, report
