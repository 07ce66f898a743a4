"""Sessions across replicas: a request that reaches another replica than the one holding its
session's state is passed to that replica (real servers on loopback, real HTTP)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gym_compose.server.sessions import SESSION_ID_KEY, SessionCookieMiddleware
from tests.support.ports import free_port

pytestmark = pytest.mark.protocol
KEY = "shared-by-the-replicas"
COOKIE = "CounterServer___counter"



def replica_app(name: str, address: str | None) -> SessionCookieMiddleware:
    counters: dict[str, int] = {}

    async def seed(request: Request) -> JSONResponse:
        counters[request.session[SESSION_ID_KEY]] = (await request.json())["initial_value"]
        return JSONResponse({"served_by": name})

    async def increment(request: Request) -> JSONResponse:
        session_id = request.session[SESSION_ID_KEY]
        if session_id not in counters:
            return JSONResponse({"error": "never seeded here", "served_by": name}, status_code=400)
        counters[session_id] += (await request.json())["amount"]
        return JSONResponse({"value": counters[session_id], "served_by": name},
                            headers={"x-replica": name})

    app = Starlette(routes=[Route("/seed_session", seed, methods=["POST"]),
                            Route("/increment", increment, methods=["POST"])])
    return SessionCookieMiddleware(app, cookie_name=COOKIE, secret_key=KEY, replica=address)


class Replica:
    def __init__(self, name: str, pinned: bool = True):
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.middleware = replica_app(name, self.address if pinned else None)
        self.server = uvicorn.Server(uvicorn.Config(self.middleware, host="127.0.0.1", port=self.port,
                                                    log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "replica did not start"
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def replicas():
    started: list[Replica] = []

    def start(pinned: bool = True) -> tuple[Replica, Replica]:
        pair = (Replica("a", pinned), Replica("b", pinned))
        started.extend(pair)
        return pair

    yield start
    for replica in started:
        replica.stop()


def test_a_session_keeps_reaching_the_replica_that_holds_its_state(replicas):
    a, b = replicas()
    with httpx.Client(timeout=10) as client:  # one client, its cookie jar: as an agent holds a session
        assert client.post(f"{a.url}/seed_session", json={"initial_value": 5}).json() == {"served_by": "a"}
        # the service name balanced the next call to replica b: b passes it to a, the answer comes back whole
        answer = client.post(f"{b.url}/increment", json={"amount": 2})
        assert answer.status_code == 200 and answer.json() == {"value": 7, "served_by": "a"}
        assert answer.headers["x-replica"] == "a"
        assert client.post(f"{a.url}/increment", json={"amount": 1}).json()["value"] == 8
        assert (a.middleware.forwarder.forwarded, b.middleware.forwarder.forwarded) == (0, 1)

        # a session b made stays on b, whichever replica the call reaches
        other = httpx.Client(timeout=10)
        other.post(f"{b.url}/seed_session", json={"initial_value": 100})
        assert other.post(f"{a.url}/increment", json={"amount": 1}).json() == {"value": 101, "served_by": "b"}
        other.close()

        # the holder is gone: the session cannot continue, and the answer says which replica it was on
        a.stop()
        gone = client.post(f"{b.url}/increment", json={"amount": 1})
        assert gone.status_code == 502 and a.address in gone.json()["detail"]


def test_without_pinning_another_replica_does_not_know_the_session(replicas):
    """What pinning prevents: the state of a session lives in one replica only."""
    a, b = replicas(pinned=False)
    with httpx.Client(timeout=10) as client:
        client.post(f"{a.url}/seed_session", json={"initial_value": 5})
        lost = client.post(f"{b.url}/increment", json={"amount": 2})
        assert lost.status_code == 400 and lost.json()["served_by"] == "b"
