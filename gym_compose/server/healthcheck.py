"""The readiness probe in Python: exit 0 iff GET /_gym_compose/ready on 127.0.0.1:PORT answers 200.

`healthcheck.py [--wait SECONDS] [--root] PORT`. With --root (servers on the NeMo Gym runtime,
which have no gym-compose route) it asks `GET /` and any HTTP answer counts, as NeMo Gym's own
readiness step 1 does. With --wait it keeps asking (every 50 ms) until the server is ready or
SECONDS pass. The containers' compose healthcheck is its bash twin, healthcheck.sh (no
interpreter to start on every check); this one serves the local-process target (`is_ready`) and
anyone probing from a host. It stays tiny: a raw socket, no imports beyond `socket`, runnable as a
file with `python -I -S`.
"""

import socket
import sys
import time

POLL_SECONDS = 0.05

READY_PATH = "/_gym_compose/ready"


def is_ready(port: int, host: str = "127.0.0.1", timeout: float = 3.0, root: bool = False) -> bool:
    request = f"GET {'/' if root else READY_PATH} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode()
    try:
        with socket.create_connection((host, port), timeout=timeout) as connection:
            connection.sendall(request)
            status_line = connection.recv(64).split(b"\r\n", 1)[0]
    except OSError:
        return False
    parts = status_line.split()
    return len(parts) >= 2 and parts[0].startswith(b"HTTP/") and (root or parts[1] == b"200")


def wait_until_ready(port: int, wait_seconds: float, root: bool = False) -> bool:
    deadline = time.monotonic() + wait_seconds
    while not is_ready(port, timeout=max(0.1, min(3.0, deadline - time.monotonic())), root=root):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)
    return True


def main(argv: list[str]) -> int:
    wait_seconds = 0.0
    if len(argv) >= 3 and argv[0] == "--wait":
        try:
            wait_seconds = float(argv[1])
        except ValueError:
            argv = []
        argv = argv[2:]
    root = argv[:1] == ["--root"]
    argv = argv[1:] if root else argv
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: healthcheck.py [--wait SECONDS] [--root] PORT", file=sys.stderr)
        return 2
    return 0 if wait_until_ready(int(argv[0]), wait_seconds, root) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
