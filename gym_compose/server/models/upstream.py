"""Calls from a model server to its upstream model endpoint: timeouts, retries, a concurrency cap.

One `UpstreamClient` per model server and endpoint. Every call is bounded:
- a connection must be made within `connect_timeout_seconds`;
- an attempt must be answered within `read_timeout_seconds` (a non-streaming generation answers
  only when it is done, so this is the longest generation allowed);
- the whole call, waits for a free slot and retries included, within `request_timeout_seconds`.
Retried, with exponential backoff (`retry_backoff_seconds`, doubling, at most
`max_retry_backoff_seconds`) up to `max_retries` times: HTTP 408, 429 and 5xx other than 501/505,
a refused or reset connection, a malformed answer. A `Retry-After` (seconds or HTTP date) or
`retry-after-ms` header sets the wait instead; one that would pass the deadline ends the call at
once. Not retried: a read timeout (a hung or overloaded upstream gets no second request), other 4xx
(the request is wrong; 404 too, unlike NeMo Gym, since it almost always means a wrong base URL),
and a 429 whose body says the quota or budget is spent. At most `max_concurrent_requests` calls
are in flight upstream at once; the rest wait for a slot. Giving up raises `UpstreamError`
naming the endpoint, the last status or failure and the attempts made.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import urlsplit

import orjson
from pydantic import BaseModel, Field

from gym_compose.net.http_client import HttpClient, PeerConnectError, PeerError, PeerTimeout

if TYPE_CHECKING:
    import httpx

LOG = logging.getLogger("gym_compose.server.upstream")

MAX_BODY_CHARS = 2000
_PERMANENT_429_CODES = ("insufficient_quota", "budget_exceeded")


class UpstreamCallConfig(BaseModel):
    """The config keys every model server with an upstream endpoint shares."""

    connect_timeout_seconds: float = Field(10.0, gt=0)
    read_timeout_seconds: float = Field(600.0, gt=0)
    request_timeout_seconds: float = Field(900.0, gt=0)
    max_retries: int = Field(3, ge=0)
    retry_backoff_seconds: float = Field(0.5, ge=0)
    max_retry_backoff_seconds: float = Field(30.0, ge=0)
    max_concurrent_requests: int = Field(256, ge=1)


class UpstreamError(PeerError):
    """The call to the upstream model endpoint failed for good (the peer family's member for
    endpoints outside the project). `status` is what the model server answers its caller."""

    def __init__(self, message: str, status: int = 502, upstream_status: Optional[int] = None,
                 body: bytes = b""):
        self.propagate_body = False  # the caller answers with the upstream's own error body
        self.status = status
        self.upstream_status = upstream_status
        self.body = body
        super().__init__(message)


def answer_status(upstream_status: int) -> int:
    """What the model server answers when the upstream's error status is final: the caller's own
    mistakes (400, 413, 422) pass through; the endpoint's failures are a 502."""
    return 502 if upstream_status >= 500 or upstream_status in (401, 403, 404, 408, 429) else upstream_status


def is_retryable_status(status: int) -> bool:
    return status in (408, 429) or (500 <= status <= 599 and status not in (501, 505))


def retry_after_seconds(headers: dict[str, str], now: Optional[float] = None) -> Optional[float]:
    """The wait an answer asks for: `retry-after-ms`, or `Retry-After` as seconds or an HTTP date."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _spent_quota(body: bytes) -> bool:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    error = payload.get("error") if isinstance(payload, dict) else None
    codes = [error] if isinstance(error, str) else (
        [str(error.get(key)) for key in ("code", "type") if error.get(key)] if isinstance(error, dict) else [])
    return any(code.lower() in _PERMANENT_429_CODES for code in codes)


def _excerpt(body: bytes) -> str:
    return body[:MAX_BODY_CHARS].decode("utf-8", "replace")


@dataclass
class _Answer:
    status: int
    headers: dict[str, str]
    body: bytes


class _Retry(Exception):
    """One attempt failed in a way worth another try."""

    def __init__(self, reason: str, wait: Optional[float] = None, answer: Optional[_Answer] = None):
        self.reason, self.wait, self.answer = reason, wait, answer
        super().__init__(reason)


class UpstreamClient:
    """POSTs JSON to `<base_url><path>` under the config's timeouts, retries and concurrency cap.

    Plain-HTTP upstreams (in-network servers, a local vLLM) go through the fast pooled client;
    HTTPS through httpx.
    """

    def __init__(self, base_url: str, settings: UpstreamCallConfig, headers: Optional[dict[str, str]] = None,
                 key_name: str = "base_url"):
        self.base_url = base_url.rstrip("/")
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{key_name} must be an http(s) URL, not {base_url!r}")
        self.settings = settings
        self.headers = dict(headers or {})
        self.plain = parts.scheme == "http"
        self.host = parts.hostname
        self.port = parts.port or (80 if self.plain else 443)
        self._fast = HttpClient(timeout=settings.read_timeout_seconds,
                                connect_timeout=settings.connect_timeout_seconds) if self.plain else None
        self._httpx: Optional[httpx.AsyncClient] = None
        self._slots: Optional[asyncio.Semaphore] = None

    def url(self, path: str) -> str:
        return self.base_url + path

    async def post_json(self, path: str, body: dict[str, Any], headers: Optional[dict[str, str]] = None,
                        url: Optional[str] = None) -> dict[str, Any]:
        """The upstream's JSON object answer; raises UpstreamError when the call fails for good.

        `url` (absolute) replaces `<base_url><path>`, for endpoints outside the base (vLLM's
        /tokenize sits beside /v1)."""
        target = url or self.url(path)
        payload = orjson.dumps(body)
        merged = {**self.headers, **(headers or {})}
        settings = self.settings
        deadline = time.monotonic() + settings.request_timeout_seconds
        attempts = 0
        while True:
            attempts += 1
            try:
                answer = await self._attempt(target, payload, merged, deadline)
            except _Retry as retry:
                wait = retry.wait
                if wait is None:
                    wait = min(settings.max_retry_backoff_seconds, settings.retry_backoff_seconds * 2 ** (attempts - 1))
                    wait *= random.uniform(0.8, 1.0)  # spread the retries of calls that failed together
                given_up = self._give_up_reason(attempts, wait, deadline, retry.wait is not None)
                if given_up is not None:
                    raise self._final_error(target, retry, attempts, given_up) from None
                LOG.warning("upstream %s: %s; retry %d/%d in %.1f s", target, retry.reason, attempts,
                            settings.max_retries, wait)
                await asyncio.sleep(wait)
                continue
            return self._decode(target, answer, attempts)

    def _give_up_reason(self, attempts: int, wait: float, deadline: float, asked: bool) -> Optional[str]:
        settings = self.settings
        if attempts > settings.max_retries:
            plural = "s" if attempts > 1 else ""
            return f"gave up after {attempts} attempt{plural} (max_retries: {settings.max_retries})"
        remaining = deadline - time.monotonic()
        if wait >= remaining:
            what = f"it asked to retry after {wait:.1f} s" if asked else f"the next retry would start in {wait:.1f} s"
            return (f"gave up after {attempts} attempt{'s' if attempts > 1 else ''}: {what}, past the "
                    f"{settings.request_timeout_seconds:g} s the whole call may take (request_timeout_seconds)")
        return None

    def _final_error(self, target: str, retry: _Retry, attempts: int, given_up: str) -> UpstreamError:
        if retry.answer is not None:
            return UpstreamError(
                f"upstream model endpoint {target} answered HTTP {retry.answer.status}; {given_up}: "
                f"{_excerpt(retry.answer.body)}",
                answer_status(retry.answer.status), retry.answer.status, retry.answer.body,
            )
        return UpstreamError(f"upstream model endpoint {target} failed: {retry.reason}; {given_up}")

    async def _attempt(self, target: str, payload: bytes, headers: dict[str, str], deadline: float) -> _Answer:
        settings = self.settings
        if self._slots is None:
            self._slots = asyncio.Semaphore(settings.max_concurrent_requests)
        remaining = deadline - time.monotonic()
        try:
            await asyncio.wait_for(self._slots.acquire(), max(remaining, 0.001))
        except asyncio.TimeoutError:
            raise UpstreamError(
                f"upstream model endpoint {target}: no free slot within {settings.request_timeout_seconds:g} s "
                f"(request_timeout_seconds); {settings.max_concurrent_requests} calls were in flight "
                "(max_concurrent_requests)", 503) from None
        try:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise UpstreamError(f"upstream model endpoint {target}: no answer within "
                                    f"{settings.request_timeout_seconds:g} s (request_timeout_seconds)", 504)
            limit = min(settings.read_timeout_seconds, remaining)
            try:
                if self._fast is not None:
                    answer = await self._post_fast(payload, headers, target, limit)
                else:
                    answer = await self._post_httpx(target, payload, headers, limit)
            except asyncio.TimeoutError:
                raise self._timeout(target, limit) from None
        finally:
            self._slots.release()
        if is_retryable_status(answer.status):
            if answer.status == 429 and _spent_quota(answer.body):
                raise UpstreamError(
                    f"upstream model endpoint {target} answered HTTP 429 (quota or budget spent; not retried): "
                    f"{_excerpt(answer.body)}", 502, 429, answer.body)
            raise _Retry(f"HTTP {answer.status}", retry_after_seconds(answer.headers), answer)
        return answer

    def _timeout(self, target: str, limit: float) -> UpstreamError:
        settings = self.settings
        if limit < settings.read_timeout_seconds:
            return UpstreamError(f"upstream model endpoint {target}: no answer within the "
                                 f"{settings.request_timeout_seconds:g} s the whole call may take "
                                 "(request_timeout_seconds); not retried", 504)
        return UpstreamError(f"upstream model endpoint {target}: no answer within {limit:g} s "
                             "(read_timeout_seconds); not retried", 504)

    async def _post_fast(self, payload: bytes, headers: dict[str, str], target: str, limit: float) -> _Answer:
        parts = urlsplit(target)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            assert self._fast is not None  # only plain-HTTP upstreams come here
            response = await asyncio.wait_for(
                self._fast.request("POST", self.host, self.port, path, content=payload,
                                   headers={"Content-Type": "application/json", **headers}, timeout=limit + 1),
                limit,
            )
        except (PeerTimeout, asyncio.TimeoutError):  # before OSError: TimeoutError is one
            raise asyncio.TimeoutError from None
        except PeerConnectError as error:
            raise _Retry(f"cannot connect: {error}") from None
        except (ConnectionError, OSError) as error:  # reset, closed early, malformed HTTP
            raise _Retry(f"connection failed before a complete answer: {error or type(error).__name__}") from None
        headers_out = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in response.headers}
        return _Answer(response.status, headers_out, response.body)

    async def _post_httpx(self, target: str, payload: bytes, headers: dict[str, str], limit: float) -> _Answer:
        import httpx

        if self._httpx is None:
            settings = self.settings
            self._httpx = httpx.AsyncClient(
                timeout=httpx.Timeout(settings.read_timeout_seconds, connect=settings.connect_timeout_seconds),
                limits=httpx.Limits(max_connections=settings.max_concurrent_requests,
                                    max_keepalive_connections=min(64, settings.max_concurrent_requests)),
            )
        try:
            response = await asyncio.wait_for(
                self._httpx.post(target, content=payload, headers={"content-type": "application/json", **headers}),
                limit,
            )
        except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
            raise asyncio.TimeoutError from None
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            raise _Retry(f"cannot connect: {error or type(error).__name__}") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as error:
            raise _Retry(f"connection failed before a complete answer: {error or type(error).__name__}") from None
        except httpx.HTTPError as error:
            raise UpstreamError(f"upstream model endpoint {target} failed: {error!r}") from None
        return _Answer(response.status_code, {k.lower(): v for k, v in response.headers.items()}, response.content)

    def _decode(self, target: str, answer: _Answer, attempts: int) -> dict[str, Any]:
        status = answer.status
        if not 200 <= status < 300:
            raise UpstreamError(
                f"upstream model endpoint {target} answered HTTP {status}: {_excerpt(answer.body)}",
                answer_status(status), status, answer.body,
            )
        try:
            decoded = orjson.loads(answer.body)
        except orjson.JSONDecodeError as error:
            raise UpstreamError(
                f"upstream model endpoint {target} answered HTTP {status} with a body that is not JSON "
                f"({error}): {_excerpt(answer.body)}", 502, status, answer.body) from None
        if not isinstance(decoded, dict):
            raise UpstreamError(f"upstream model endpoint {target} answered HTTP {status} with JSON that is not "
                                f"an object: {_excerpt(answer.body)}", 502, status, answer.body)
        if attempts > 1:
            LOG.info("upstream %s answered on attempt %d", target, attempts)
        return decoded

    async def aclose(self) -> None:
        if self._fast is not None:
            await self._fast.aclose()
        if self._httpx is not None:
            await self._httpx.aclose()
