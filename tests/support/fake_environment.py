"""A fake environment server (raw ASGI: the cheapest server, so timings show the collector).

Run as a script: `python fake_environment.py PORT MODE [DELAY_S]`. MODE: ok (reward = task index
% 2), flaky (500 on a first attempt of every third task), die (exits hard after 5 requests,
mid-request). With FAKE_SERVER_SEEN=FILE in its environment it appends a line to FILE as each
request arrives (so a test knows what is in flight); with FAKE_SERVER_ANSWERS=N it answers the
first N requests and holds every later one (a run that cannot finish, so a fault lands mid-run
whatever the machine's speed). `start_fake_server` runs it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def make_app(mode: str, delay_s: float):
    import asyncio

    import orjson

    served = {"count": 0}
    answers = int(os.environ.get("FAKE_SERVER_ANSWERS", "-1"))

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        served["count"] += 1
        if os.environ.get("FAKE_SERVER_SEEN"):
            with open(os.environ["FAKE_SERVER_SEEN"], "a") as seen:
                seen.write("request\n")
        if mode == "die" and served["count"] > 5:
            os._exit(1)
        if 0 <= answers < served["count"]:
            await asyncio.Event().wait()  # held until the process ends
        row = orjson.loads(body)
        if delay_s:
            await asyncio.sleep(delay_s)
        status = 200
        if mode == "flaky" and row["_ng_task_index"] % 3 == 0 and not row.get("_ng_attempt_index"):
            status, payload = 500, {"detail": "flaky failure"}
        else:
            payload = {"responses_create_params": row["responses_create_params"], "response": {"usage": {"input_tokens": 3}},
                       "reward": float(row["_ng_task_index"] % 2), "echo_rollout": row["_ng_rollout_index"]}
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": orjson.dumps(payload)})

    return app


if __name__ == "__main__":
    import uvicorn

    port, mode = int(sys.argv[1]), sys.argv[2]
    delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    uvicorn.run(make_app(mode, delay), host="127.0.0.1", port=port, log_level="warning", access_log=False)



def start_fake_server(mode: str, delay_s: float = 0.0):
    from tests.support.ports import free_port  # here: run as a script, this file imports nothing of the tests

    port = free_port()
    proc = subprocess.Popen([sys.executable, str(HERE), str(port), mode, str(delay_s)])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("fake environment server did not start within 20 s")
