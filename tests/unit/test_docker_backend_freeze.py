"""A pause (and a paused commit) that runc could not settle under load ("unable to freeze", the
container left running) is asked again a few times; any other engine error is not. The Engine API
client is a stand-in; the sleeps between attempts are recorded, not slept."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

import docker
from gym_compose.sandbox.broker import docker_backend
from gym_compose.sandbox.broker.broker_errors import BackendError
from gym_compose.sandbox.broker.docker_backend import DockerBackend

FREEZE_FAILED = "Cannot pause container c1: OCI runtime pause failed: unable to freeze: unknown"


class Api:
    def __init__(self, failures: list[str]):
        self.failures, self.calls = list(failures), []

    def _answer(self, name, result):
        self.calls.append(name)
        if self.failures:
            raise docker.errors.APIError(self.failures.pop(0))
        return result

    def pause(self, container_id):
        return self._answer("pause", None)

    def commit(self, container_id, **kwargs):
        return self._answer("commit", {"Id": "sha256:fork"})


def backend(api: Api) -> DockerBackend:
    engine = DockerBackend.__new__(DockerBackend)  # no engine to ask for its API version
    engine._docker, engine.api, engine._pool = docker, api, ThreadPoolExecutor(max_workers=1)
    return engine


@pytest.fixture
def slept(monkeypatch):
    waits: list[float] = []

    async def sleep(seconds):
        waits.append(seconds)

    monkeypatch.setattr(docker_backend.asyncio, "sleep", sleep)
    return waits


def test_a_freeze_that_did_not_settle_is_asked_again(slept):
    api = Api([FREEZE_FAILED, FREEZE_FAILED])
    asyncio.run(backend(api).pause("c1"))
    assert api.calls == ["pause", "pause", "pause"] and len(slept) == 2


def test_a_paused_commit_is_asked_again_too(slept):
    api = Api([FREEZE_FAILED])
    assert asyncio.run(backend(api).commit("c1", "fork", "1", {})) == "sha256:fork"
    assert api.calls == ["commit", "commit"]


def test_it_gives_up_after_its_attempts_and_other_errors_are_not_retried(slept):
    api = Api([FREEZE_FAILED] * docker_backend.FREEZE_ATTEMPTS)
    with pytest.raises(BackendError, match="unable to freeze"):
        asyncio.run(backend(api).pause("c1"))
    assert len(api.calls) == docker_backend.FREEZE_ATTEMPTS
    api = Api(["Container c1 is not running"])
    with pytest.raises(BackendError, match="not running"):
        asyncio.run(backend(api).pause("c1"))
    assert api.calls == ["pause"]
