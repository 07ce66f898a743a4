"""The local web server behind `gym-compose view`: the page, its assets and a small JSON API.

Routes (every `/api` answer is JSON; a bad query is 400, an unknown run or rollout 404):
- `GET /`                                   the page
- `GET /assets/<name>`                      viewer.js/css, datatables.js/css, plotly.js
- `GET /api/runs`                           every run's summary (metrics, manifest, histogram, pass@k)
- `GET /api/runs/<n>/tasks?start=&length=&search=&order=&dir=&status=`   one page of the task table
- `GET /api/runs/<n>/rollouts/<id>`         one rollout as a conversation (id: r<n> or f<n>)
- `GET /api/compare?start=&length=&search=&order=&dir=&differing=`       tasks side by side
Each API call first indexes what the collector appended since the last one, so a reload shows
new rollouts. Served, a request must be addressed to the server's own names (`host_check`: no
DNS rebinding), and every answer says `X-Content-Type-Options: nosniff`. Handlers run one at a
time on the event loop (a local, one-person server); only
the first indexing runs in a thread of its own, and the API waits for it.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import Route

from gym_compose.view import assets
from gym_compose.view.host_check import AllowedHosts, HostCheck
from gym_compose.view.page import live_page
from gym_compose.view.service import TaskQuery, ViewService


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS), status_code=status,
                    media_type="application/json", headers={"cache-control": "no-store"})


def _query(request: Request, default_order: str = "task") -> TaskQuery:
    params = request.query_params
    try:
        return TaskQuery(
            start=int(params.get("start", 0)),
            length=int(params.get("length", 25)),
            search=params.get("search", ""),
            order=params.get("order") or default_order,
            descending=params.get("dir", "asc") == "desc",
            status=params.get("status", "all"),
        )
    except ValueError as error:
        raise ValueError(f"bad query: {error}") from None


def create_app(service: ViewService, indexed: threading.Event | None = None) -> Starlette:
    """The app; with `indexed`, API calls wait until the first indexing (in another thread) is done."""
    page = live_page()

    async def index(request: Request) -> Response:
        return HTMLResponse(page, headers={"cache-control": "no-store"})

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            path = assets.asset_path(name)
        except LookupError:
            return _json({"error": f"no asset {name}"}, 404)
        return FileResponse(path, media_type=assets.media_type(name), headers={"cache-control": "max-age=3600"})

    def api(handler):
        async def endpoint(request: Request) -> Response:
            if indexed is not None and not indexed.is_set():
                await asyncio.get_running_loop().run_in_executor(None, indexed.wait)
            try:
                service.refresh()
                return _json(handler(request))
            except LookupError as error:
                return _json({"error": str(error).strip("'\"")}, 404)
            except ValueError as error:
                return _json({"error": str(error)}, 400)
            except OSError as error:  # a run file we cannot read: say which
                return _json({"error": f"cannot read {error.filename or 'a run file'}: {error.strerror or error}"}, 500)
        return endpoint

    def runs(request: Request) -> dict[str, Any]:
        return {"runs": service.summaries()}

    def tasks(request: Request) -> dict[str, Any]:
        return service.task_page(int(request.path_params["run"]), _query(request))

    def rollout(request: Request) -> dict[str, Any]:
        return service.rollout(int(request.path_params["run"]), request.path_params["rollout"])

    def compare(request: Request) -> dict[str, Any]:
        return service.comparison(_query(request, "differs"), request.query_params.get("differing") == "1")

    return Starlette(routes=[
        Route("/", index),
        Route("/assets/{name}", asset),
        Route("/api/runs", api(runs)),
        Route("/api/runs/{run:int}/tasks", api(tasks)),
        Route("/api/runs/{run:int}/rollouts/{rollout}", api(rollout)),
        Route("/api/compare", api(compare)),
    ])


def bind(host: str, port: int) -> socket.socket:
    from gym_compose.errors import UserError

    if not 0 <= port <= 65535:
        raise UserError(f"--port {port} is not a TCP port",
                        hint="give one of 1-65535, or leave it out to take a free one")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError) as error:  # OverflowError: a port the socket module refuses itself
        sock.close()
        why = getattr(error, "strerror", None) or error
        raise UserError(f"cannot listen on {host}:{port}: {why}",
                        hint="pick another --port, or leave it out to take a free one; --host takes an address "
                        "of this machine (127.0.0.1 by default)") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(folders: list[Path], host: str = "127.0.0.1", port: int = 0, open_browser: bool = False) -> None:
    """Print the URL, index the runs (the page's first API call waits for it), serve until Ctrl-C.

    Indexing runs beside the server's start and the browser's loading of the page, so a large
    run's first screen costs the longer of the two, not their sum.
    """
    import uvicorn

    service = ViewService(folders)
    indexed = threading.Event()

    def index() -> None:
        started = time.monotonic()
        try:
            service.refresh()
            service.summaries()  # group tasks and compute the figures before the page asks
        except OSError as error:  # the API calls report it to the page too
            print(f"error: cannot read {error.filename or 'a run file'}: {error.strerror or error}", file=sys.stderr)
            return
        finally:
            indexed.set()
        for run in service.runs:
            print(f"{run.label}: {len(run.rollouts)} rollouts, {len(run.failures)} failed attempts", file=sys.stderr)
        print(f"indexed in {time.monotonic() - started:.1f}s", file=sys.stderr)
        try:
            service.warm_sent_inputs()  # the prompts of tasks that never got an answer, for later pages
        except (OSError, ValueError):
            pass  # shown as a missing prompt; opening such a rollout reports the error itself

    app = create_app(service, indexed)
    sock = bind(host, port)
    shown_host = f"[{host}]" if ":" in host else host
    url = f"http://{shown_host}:{sock.getsockname()[1]}/"
    threading.Thread(target=index, name="index", daemon=True).start()
    print(f"gym-compose view: {url}  (Ctrl-C stops)", flush=True)
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    served = HostCheck(app, AllowedHosts(host))
    server = uvicorn.Server(uvicorn.Config(served, log_level="warning", access_log=False, lifespan="off"))
    server.run(sockets=[sock])
