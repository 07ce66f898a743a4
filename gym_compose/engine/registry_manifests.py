"""Does a registry hold an image, and how large is it compressed? Asked through the registry's
HTTP API (the distribution spec's `HEAD /v2/<name>/manifests/<reference>`, then a GET of the
manifest for its size, except on Docker Hub, whose rate limit counts manifest GETs as pulls and
HEADs not), concurrently, with the
host's `docker login` credentials (registry_login.py) and the token flow registries such as Docker
Hub use (a `WWW-Authenticate: Bearer realm=...` challenge answered at its realm). Plain HTTP is
tried where the engine would pull that way (a loopback or `insecure-registries` host).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from gym_compose.contract import DOCKER_HUB, image_registry

if TYPE_CHECKING:
    import httpx

HUB_API = "registry-1.docker.io"
TIMEOUT_S = 10.0
WORKERS = 16
MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"])
LISTS = ("index", "manifest.list")
CHALLENGE_FIELD = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class ImageReference:
    registry: str  # as contract.image_registry names it (docker.io for Docker Hub)
    repository: str  # the path in the registry: library/python, swe/sweap-images
    reference: str  # a tag or a digest

    @classmethod
    def parse(cls, image: str) -> "ImageReference":
        registry = image_registry(image)
        first, _, rest = image.partition("/")
        path = rest if rest and (first == registry or first in ("docker.io", "index.docker.io",
                                                                 "registry-1.docker.io")) else image
        if "@" in path:
            path, reference = path.split("@", 1)
        else:
            head, colon, tag = path.rpartition(":")
            path, reference = (head, tag) if colon and "/" not in tag else (path, "latest")
        if registry == DOCKER_HUB and "/" not in path:
            path = f"library/{path}"
        return cls(registry, path, reference)

    @property
    def api_host(self) -> str:
        return HUB_API if self.registry == DOCKER_HUB else self.registry


@dataclass(frozen=True)
class ManifestAnswer:
    image: str
    found: Optional[bool]  # False: the registry has no such tag or digest; None: it could not be told
    compressed_bytes: Optional[int] = None  # the layers and config of the linux/amd64 image; None: not asked
    problem: str = ""  # why not found, or why it could not be told
    needs_login: bool = False  # the registry asked for credentials the host has not (or refused them)


class ManifestClient:
    """One client for many images: a token and a scheme per registry, found once."""

    def __init__(self, credentials: Callable[[str], Optional[tuple[str, str]]],
                 plain_http: Callable[[str], bool], client: "Optional[httpx.Client]" = None):
        import httpx

        self.http = client or httpx.Client(timeout=TIMEOUT_S, follow_redirects=True)
        self.credentials, self.plain_http = credentials, plain_http
        self._lock = threading.Lock()
        self._schemes: dict[str, str] = {}
        self._tokens: dict[tuple[str, str], str] = {}

    def ask(self, image: str) -> ManifestAnswer:
        import httpx

        ref = ImageReference.parse(image)
        try:
            answer = self._get(ref, ref.reference, "HEAD")
            if answer.status_code == 404:
                return ManifestAnswer(image, False, problem=f"{ref.registry} has no {ref.repository}:"
                                      f"{ref.reference}" if not ref.reference.startswith("sha256:")
                                      else f"{ref.registry} has no {ref.repository}@{ref.reference}")
            if answer.status_code in (401, 403):
                had = self.credentials(ref.registry) is not None
                why = ("refused the credentials of `docker login " + ref.registry + "`" if had
                       else "asks for credentials")
                return ManifestAnswer(image, None, problem=f"{ref.registry} {why} (HTTP {answer.status_code})",
                                      needs_login=True)
            if answer.status_code != 200:
                return ManifestAnswer(image, None, problem=f"{ref.registry} answered HTTP {answer.status_code}")
            if ref.registry == DOCKER_HUB:  # Docker Hub counts a manifest GET as a pull (its rate limit), not a HEAD
                return ManifestAnswer(image, True)
            return ManifestAnswer(image, True, compressed_bytes=self._size(ref, self._get(ref, ref.reference).json()))
        except (httpx.HTTPError, ValueError) as error:
            return ManifestAnswer(image, None, problem=f"{ref.registry}: {type(error).__name__}: {error}")

    def ask_all(self, images: Iterable[str], workers: int = WORKERS) -> dict[str, ManifestAnswer]:
        unique = sorted(set(images))
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(unique) or 1))) as pool:
            return dict(zip(unique, pool.map(self.ask, unique), strict=True))

    def _size(self, ref: ImageReference, manifest: dict[str, Any]) -> Optional[int]:
        media = str(manifest.get("mediaType") or "")
        if any(kind in media for kind in LISTS) or "manifests" in manifest:
            entries = manifest.get("manifests") or []
            amd64 = [m for m in entries if (m.get("platform") or {}).get("os") == "linux"
                     and (m.get("platform") or {}).get("architecture") == "amd64"]
            chosen = (amd64 or entries or [None])[0]
            if not chosen or not chosen.get("digest"):
                return None
            answer = self._get(ref, str(chosen["digest"]))
            if answer.status_code != 200:
                return None
            manifest = answer.json()
        parts = [*(manifest.get("layers") or []), manifest.get("config") or {}]
        return sum(int(part.get("size") or 0) for part in parts)

    def _get(self, ref: ImageReference, reference: str, method: str = "GET") -> "httpx.Response":
        url = f"{self._scheme(ref.api_host)}://{ref.api_host}/v2/{ref.repository}/manifests/{reference}"
        headers = {"Accept": MANIFEST_TYPES}
        token = self._tokens.get((ref.api_host, ref.repository))
        if token:
            headers["Authorization"] = token
        answer = self.http.request(method, url, headers=headers)
        if answer.status_code == 401:
            token = self._authorize(ref, answer.headers.get("www-authenticate", ""))
            if token:
                answer = self.http.request(method, url, headers={**headers, "Authorization": token})
        return answer

    def _authorize(self, ref: ImageReference, challenge: str) -> Optional[str]:
        """The Authorization header a 401's challenge asks for, or None when there is none to give."""
        import base64

        login = self.credentials(ref.registry)
        scheme, _, fields = challenge.partition(" ")
        if scheme.lower() == "basic":
            if login is None:
                return None
            header = "Basic " + base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode()
        elif scheme.lower() == "bearer":
            params = dict(CHALLENGE_FIELD.findall(fields))
            if not params.get("realm"):
                return None
            query = {"service": params.get("service", ""), "scope": f"repository:{ref.repository}:pull"}
            answer = self.http.get(params["realm"], params=query, auth=login)
            if answer.status_code != 200:
                return None
            body = answer.json()
            token = body.get("token") or body.get("access_token")
            if not token:
                return None
            header = f"Bearer {token}"
        else:
            return None
        self._tokens[(ref.api_host, ref.repository)] = header
        return header

    def _scheme(self, host: str) -> str:
        with self._lock:
            if host not in self._schemes:
                self._schemes[host] = self._find_scheme(host)
            return self._schemes[host]

    def _find_scheme(self, host: str) -> str:
        import httpx

        try:
            self.http.get(f"https://{host}/v2/")
            return "https"
        except httpx.HTTPError:
            return "http" if self.plain_http(host) else "https"
