"""`/mcp` on a resources server: its typed tool routes over MCP (Streamable HTTP), NeMo Gym 0.7's way.

A resources server whose config sets `expose_tools_over_mcp: true` serves, beside its plain
`POST /<tool>` routes, an MCP endpoint at `/mcp` (the official `mcp` SDK's low-level `Server` and
`StreamableHTTPSessionManager`, stateless, JSON answers), as NeMo Gym 0.7's
`nemo_gym/mcp_auto_exposure.py` does:

- the tools are the app's typed `POST /<tool>` routes (not `/seed_session`, `/verify`,
  `/close_session`, `/aggregate_metrics`, `/mcp`, nor a route with a path parameter); a route's
  body model gives the tool's input schema, its docstring the description. The server may
  override `mcp_tools(harvested, catchall)` to filter them or add tools behind its one catch-all
  route (`catchall.tool(name, input_schema, description)`);
- `/seed_session` answers, besides what the server answers, `mcp: {server_name, url_path,
  transport, headers: {X-NeMo-Gym-Session-Token: <token>}}` (an Environment Server's seed:
  `resources_tools`), a token signed with the server's session secret that names the rollout's
  session and the tools `mcp_allowed_tools_for_session(seed_body)` allows (None: all);
- `tools/call` needs that header: without it, with a token this server did not sign, for a tool
  the token does not allow, or beside a session cookie of another session, the call is refused
  (an MCP error result). A call runs the tool's own route for that session: the same request a
  `POST /<tool>` with the session's cookie makes, through the app's middleware and validation, so
  it answers exactly what `POST /<tool>` answers (a 4xx/5xx becomes an error result naming it);
- `/verify` sees MCP-namespaced tool names (`mcp__<server>__<tool>`, how MCP clients record them)
  as the bare names, and its answer keeps the names as the model emitted them.

The `mcp` package is imported only here, and this module only when the flag is set: a server image
gets `mcp` in its requirements when one of its instances sets it (plan: `Service.extra_requirements`).
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, MutableMapping, Optional, get_type_hints

from itsdangerous import BadSignature, URLSafeSerializer
from pydantic import BaseModel

from gym_compose.contract import MCP_REQUIREMENT
from gym_compose.server.sessions import SESSION_ID_KEY, SessionCookieCodec

if TYPE_CHECKING:
    from gym_compose.server.resources import SimpleResourcesServer

LOG = logging.getLogger("gym_compose.server.mcp")

MCP_PATH = "/mcp"
TOKEN_HEADER = "X-NeMo-Gym-Session-Token"  # NeMo Gym 0.7 NEMO_GYM_MCP_SESSION_TOKEN_HEADER
METADATA_KEY = "mcp"  # the /seed_session answer's key (NEMO_GYM_MCP_METADATA_KEY)
ENVIRONMENT_METADATA_KEY = "resources_tools"  # ... of an Environment Server's typed seed answer
TOKEN_SALT = "nemo-gym-mcp-session-token"
RESERVED_TOOL_NAMES = frozenset({"verify", "seed_session", "close_session", "aggregate_metrics", "mcp"})
PERMISSIVE_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": True}
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]+")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class McpExposureError(ValueError):
    """The server's tools cannot be served over MCP as configured (raised at start-up)."""


class ToolCallRefused(ValueError):
    """A tools/call the token does not allow; the SDK answers it as an error result."""


@dataclass(frozen=True)
class McpTool:
    """One tool of `/mcp`: what tools/list shows and the route a call runs."""

    name: str
    input_schema: dict[str, Any] = field(default_factory=lambda: dict(PERMISSIVE_SCHEMA))
    description: Optional[str] = None
    path: str = ""  # the route a call posts to; "/<name>" when empty


class CatchAll:
    """The server's one parameterized POST route (`/{path}`): `tool(...)` makes a tool served by it."""

    def __init__(self, path: str):
        self.path = path

    def tool(self, name: str, input_schema: Optional[dict[str, Any]] = None,
             description: Optional[str] = None) -> McpTool:
        return McpTool(name=name, input_schema=input_schema or dict(PERMISSIVE_SCHEMA), description=description,
                       path="/" + name)


def harvest_tools(app: Any) -> tuple[list[McpTool], Optional[CatchAll]]:
    """The app's typed POST routes as tools, and its catch-all route if it has exactly one."""
    from fastapi.routing import APIRoute

    tools: list[McpTool] = []
    catchalls: list[str] = []
    for route in app.router.routes:
        if not isinstance(route, APIRoute) or "POST" not in (route.methods or set()):
            continue
        name = route.path.lstrip("/")
        if name in RESERVED_TOOL_NAMES:
            continue
        if "{" in route.path:
            catchalls.append(route.path)
            continue
        model = _body_model(route.endpoint)
        schema = model.model_json_schema() if model is not None else dict(PERMISSIVE_SCHEMA)
        description = (route.description or route.summary or "").strip() or None
        tools.append(McpTool(name=name, input_schema=schema, description=description, path=route.path))
    return tools, CatchAll(catchalls[0]) if len(catchalls) == 1 else None


def _body_model(endpoint: Callable[..., Any]) -> Optional[type[BaseModel]]:
    try:
        hints = get_type_hints(endpoint)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: no schema, not a failure
        hints = {}
    for name, parameter in inspect.signature(endpoint).parameters.items():
        annotation = hints.get(name, parameter.annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return annotation
    return None


def checked_tools(server_name: str, selected: Optional[list[McpTool]]) -> dict[str, McpTool]:
    tools: dict[str, McpTool] = {}
    for tool in selected or []:
        if not _TOOL_NAME.fullmatch(tool.name):
            raise McpExposureError(
                f"{server_name}: MCP tool name {tool.name!r} does not match ^[A-Za-z0-9_-]+$ (MCP clients "
                "reject it); rename the route, or set expose_tools_over_mcp: false")
        if tool.name in RESERVED_TOOL_NAMES:
            raise McpExposureError(f"{server_name}: MCP tool {tool.name!r} collides with the reserved endpoint "
                                   f"names {sorted(RESERVED_TOOL_NAMES)}; rename it")
        if tool.name in tools:
            raise McpExposureError(f"{server_name}: two MCP tools are named {tool.name!r} (mcp_tools())")
        tools[tool.name] = tool
    return tools


def normalize_tool_name(name: str, server_name: str) -> str:
    """`mcp__<server>__<tool>` -> `<tool>` (how MCP clients record a server's tools); else unchanged."""
    prefix = f"mcp__{server_name}__"
    return name[len(prefix):] if name.startswith(prefix) else name


@dataclass(frozen=True)
class Claims:
    session: dict[str, Any]  # the session as its cookie holds it (id, and the replica holding it)
    tools: Optional[frozenset[str]]  # None: every tool


class SessionTokens:
    """The per-rollout token: signed with the server's session secret, naming the session and its tools."""

    def __init__(self, secret: str, server_name: str):
        self.serializer = URLSafeSerializer(secret, salt=TOKEN_SALT)
        self.server_name = server_name

    def mint(self, session: dict[str, Any], tools: Optional[list[str]]) -> str:
        return str(self.serializer.dumps({"sid": session[SESSION_ID_KEY], "session": session,
                                          "server": self.server_name, "tools": tools}))

    def read(self, token: Optional[str]) -> Claims:
        if not token:
            raise ToolCallRefused(f"Missing {TOKEN_HEADER} for Gym MCP tool call: send the header that "
                                  f"/seed_session answered under {METADATA_KEY}.headers")
        try:
            payload = self.serializer.loads(token)
        except BadSignature:
            raise ToolCallRefused(f"Invalid Gym MCP session token: {self.server_name} did not mint it") from None
        if not isinstance(payload, dict) or payload.get("server") != self.server_name or not payload.get("sid"):
            raise ToolCallRefused(f"Invalid Gym MCP session token: not a session of {self.server_name}")
        held = payload.get("session")
        session: dict[str, Any] = {**(held if isinstance(held, dict) else {}), SESSION_ID_KEY: payload["sid"]}
        allowed = payload.get("tools")
        return Claims(session, None if allowed is None else frozenset(allowed))


class McpExposure:
    """The ASGI app around a resources server's app: `/mcp`, and the token in `/seed_session`."""

    def __init__(self, server: SimpleResourcesServer, app: Any):
        from mcp.server.lowlevel import Server as LowLevelServer
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        self.app = app
        self.server = server
        self.server_name = server.config.name or type(server).__name__
        harvested, catchall = harvest_tools(app)
        self.tools = checked_tools(self.server_name, server.mcp_tools(harvested, catchall))
        self.tokens = SessionTokens(server.session_cookie_secret(), self.server_name)
        self.cookie_name = server.get_session_middleware_key()
        self.cookies = SessionCookieCodec(server.session_cookie_secret())
        self.mcp = LowLevelServer(self.server_name)
        self.mcp.list_tools()(self._list_tools)
        self.mcp.call_tool(validate_input=False)(self._call_tool)
        # Stateless: every POST /mcp stands alone (the token, not an MCP session, carries the rollout), as
        # in NeMo Gym. No DNS-rebinding check: harnesses reach the server by service name or a published
        # host port, never a browser; the token is what guards the tools.
        self.manager = StreamableHTTPSessionManager(
            app=self.mcp, event_store=None, json_response=True, stateless=True,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        LOG.info("%s: %d tool(s) over MCP at %s: %s", self.server_name, len(self.tools), MCP_PATH,
                 ", ".join(self.tools) or "(none)")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            async with self.manager.run():  # the SDK's task group lives as long as the server
                await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        if path == MCP_PATH or path.startswith(MCP_PATH + "/"):
            return await self.manager.handle_request(scope, receive, send)
        if scope["method"] == "POST" and path == "/seed_session":
            return await self._seed_session(scope, receive, send)
        if scope["method"] == "POST" and path == "/verify":
            return await self._verify(scope, receive, send)
        await self.app(scope, receive, send)

    # ---- /seed_session: the server's answer, plus the rollout's token

    async def _seed_session(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        status, headers, answer = await _call(self.app, scope, body)
        session = scope.get("session")  # set by the session middleware on this very scope
        if 200 <= status < 300 and isinstance(session, dict) and session.get(SESSION_ID_KEY):
            try:
                payload = json.loads(answer)
            except ValueError:
                payload = None
            if isinstance(payload, dict):
                seed_body = _json_object(body)
                environment_form = "resources_session_id" in payload
                key = ENVIRONMENT_METADATA_KEY if environment_form else METADATA_KEY
                if payload.get(key) is None:
                    hook_body = seed_body.get("task_data") if environment_form else seed_body
                    allowed = self.server.mcp_allowed_tools_for_session(hook_body if isinstance(hook_body, dict)
                                                                        else {})
                    payload[key] = {"server_name": self.server_name, "url_path": MCP_PATH, "transport": "http",
                                    "headers": {TOKEN_HEADER: self.tokens.mint(dict(session), allowed)}}
                    answer = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        await _answer(send, status, headers, answer)

    # ---- /verify: MCP-namespaced tool names scored as the bare ones

    async def _verify(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        payload = _json_object(body) if body.strip() else None
        calls = _function_calls(payload)
        emitted = {call.get("call_id"): call.get("name") for call in calls}
        if not any(isinstance(name, str) and name.startswith("mcp__") for name in emitted.values()):
            status, headers, answer = await _call(self.app, scope, body)
            return await _answer(send, status, headers, answer)
        for call in calls:
            call["name"] = normalize_tool_name(str(call.get("name")), self.server_name)
        status, headers, answer = await _call(self.app, scope, json.dumps(payload).encode())
        try:
            result = json.loads(answer)
        except ValueError:
            result = None
        if 200 <= status < 300 and isinstance(result, dict):
            for call in _function_calls(result):
                if call.get("call_id") in emitted:
                    call["name"] = emitted[call["call_id"]]
            answer = json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode()
        await _answer(send, status, headers, answer)

    # ---- the MCP handlers (run inside one POST /mcp)

    def _claims(self, required: bool) -> Optional[Claims]:
        request = self.mcp.request_context.request
        headers = getattr(request, "headers", None)
        token = headers.get(TOKEN_HEADER) if headers is not None else None
        if not required and not token:
            return None
        try:
            claims = self.tokens.read(token)
        except ToolCallRefused:
            if required:
                raise
            return None
        cookie_session = self._cookie_session(headers)
        if cookie_session is not None and cookie_session.get(SESSION_ID_KEY) != claims.session[SESSION_ID_KEY]:
            raise ToolCallRefused("Gym MCP session token names another session than this request's session "
                                  "cookie: send the token /seed_session answered for this session")
        return claims

    def _cookie_session(self, headers: Any) -> Optional[dict[str, Any]]:
        cookie = headers.get("cookie") if headers is not None else None
        if not cookie:
            return None
        for part in cookie.split(";"):
            key, _, value = part.strip().partition("=")
            if key == self.cookie_name and value:
                return self.cookies.decode(value.encode("latin-1"))
        return None

    async def _list_tools(self) -> list[Any]:
        import mcp.types as types

        claims = self._claims(required=False)
        allowed = claims.tools if claims is not None else None
        return [types.Tool(name=tool.name, description=tool.description, inputSchema=tool.input_schema)
                for tool in self.tools.values() if allowed is None or tool.name in allowed]

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        import mcp.types as types

        tool = self.tools.get(name)
        if tool is None:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"Unknown tool: {name!r}. Available tools: "
                                                             f"{sorted(self.tools)}")], isError=True)
        claims = self._claims(required=True)
        assert claims is not None
        if claims.tools is not None and name not in claims.tools:
            raise ToolCallRefused(f"Tool {name!r} is not allowed for this session.")
        status, text = await self.post_tool(tool.path or "/" + name, claims.session, arguments or {})
        if not 200 <= status < 300:
            raise ValueError(f"HTTP {status} from POST /{name}: {text}")
        try:
            payload = json.loads(text)
        except ValueError:
            payload = None
        content = [types.TextContent(type="text", text=text)]
        return (content, payload) if isinstance(payload, dict) else content

    async def post_tool(self, path: str, session: dict[str, Any], arguments: dict[str, Any]) -> tuple[int, str]:
        """`POST <path>` for `session` through the server's own app (middleware, validation, errors)."""
        cookie = b"%s=%s" % (self.cookie_name.encode("latin-1"), self.cookies.encode(session))
        scope = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
            "query_string": b"", "client": ("127.0.0.1", 0), "server": ("mcp", 80),
            "headers": [(b"content-type", b"application/json"), (b"cookie", cookie)],
        }
        status, _, answer = await _call(self.app, scope, json.dumps(arguments).encode())
        return status, answer.decode("utf-8", "replace")


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


async def _call(app: Any, scope: Scope, body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Run one request through `app` in-process; its status, headers and whole body."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    status, headers, chunks = 500, [], []

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, headers, b"".join(chunks)


async def _answer(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    kept = [(key, value) for key, value in headers if key.lower() != b"content-length"]
    await send({"type": "http.response.start", "status": status,
                "headers": [*kept, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body) if body.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _function_calls(payload: Any) -> list[dict[str, Any]]:
    response = payload.get("response") if isinstance(payload, dict) else None
    output = response.get("output") if isinstance(response, dict) else None
    return [item for item in output or [] if isinstance(item, dict) and item.get("type") == "function_call"]


def expose_tools_over_mcp(server: Any, app: Any) -> Any:
    """`app` with `/mcp` when the server's config sets `expose_tools_over_mcp: true`, else `app` itself."""
    if not getattr(getattr(server, "config", None), "expose_tools_over_mcp", False):
        return app
    if getattr(app, "router", None) is None or not hasattr(server, "mcp_tools"):
        raise McpExposureError(f"{type(server).__name__}: expose_tools_over_mcp needs a resources server whose "
                               "setup_webserver() returns a FastAPI app")
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise McpExposureError(
            f"{server.config.name}: expose_tools_over_mcp is set but the `mcp` package is not installed in this "
            "image; gym-compose adds it to a server's image when its config sets the key (rebuild with "
            "`gym-compose build`), or add `" + MCP_REQUIREMENT + "` to the server's requirements.txt") from None
    return McpExposure(server, app)
