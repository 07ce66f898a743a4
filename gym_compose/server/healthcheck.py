"""`python -m gym_compose.server.healthcheck PORT`: exit 0 iff GET /_gym_compose/ready answers 200.

Standard library only, so the compose healthcheck starts in milliseconds.
"""

import http.client
import sys

READY_PATH = "/_gym_compose/ready"


def is_ready(port: int, host: str = "127.0.0.1", timeout: float = 3.0) -> bool:
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", READY_PATH)
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m gym_compose.server.healthcheck PORT", file=sys.stderr)
        return 2
    return 0 if is_ready(int(argv[0])) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
