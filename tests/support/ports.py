"""Free ports for the tests' own servers and published ports, without a race between workers.

A port found by binding port 0 and closing the probe stays free only by chance until the server
binds it: the kernel hands the same range (ip_local_port_range) to every outgoing connection, and
the other pytest-xdist workers probe it too. Ports here come from below that range, and each worker
from a block of its own, so nothing but the same worker can take one it was given.
"""

from __future__ import annotations

import itertools
import os
import socket

FIRST_PORT = 20000  # below Linux's ephemeral range (32768-60999), above most well-known services
BLOCK = 1500  # ports per worker: eight blocks fit below the ephemeral range


def _worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")  # "gwN"; absent without xdist
    digits = worker.removeprefix("gw")
    return int(digits) % 8 if digits.isdigit() else 0


def _is_free(port: int) -> bool:
    for address in ("127.0.0.1", "0.0.0.0"):  # a published port binds every interface
        with socket.socket() as probe:
            try:
                probe.bind((address, port))
            except OSError:
                return False
    return True


_START = FIRST_PORT + _worker_index() * BLOCK
_NEXT = itertools.cycle(range(os.getpid() % BLOCK, os.getpid() % BLOCK + BLOCK))


def free_port() -> int:
    """A port free now on 127.0.0.1 and every interface, from this worker's own block."""
    for _ in range(BLOCK):
        port = _START + next(_NEXT) % BLOCK
        if _is_free(port):
            return port
    raise RuntimeError(f"no free port in {_START}-{_START + BLOCK - 1}: is a stack of an earlier run still up?")
