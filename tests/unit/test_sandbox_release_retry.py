"""A release that cannot reach the broker is asked again for a while: an unreleased lease holds a
max_live slot until the broker's idle timeout."""

from __future__ import annotations

import asyncio

import pytest

from gym_compose.net.http_client import HttpResponse
from gym_compose.sandbox import client as sandbox_client
from gym_compose.sandbox.types import SandboxError, SandboxHandle


def provider_answering(monkeypatch, answers: list) -> tuple[sandbox_client.BrokerProvider, list]:
    asked: list[str] = []

    async def request(self, method, path, **kwargs):
        asked.append(f"{method} {path}")
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    monkeypatch.setattr(sandbox_client.BrokerProvider, "_request", request)
    monkeypatch.setattr(sandbox_client, "RELEASE_RETRY_S", 1.0)
    return sandbox_client.BrokerProvider(), asked


def test_a_release_is_asked_again_while_the_broker_cannot_be_reached(monkeypatch):
    released = HttpResponse(200, [], b'{"released": true, "cost": {"leased_s": 1.5}}')
    provider, asked = provider_answering(monkeypatch, [ConnectionRefusedError("refused"), OSError("no route"), released])
    handle = SandboxHandle(sandbox_id="sbx-1", provider_name="gym_compose", raw={})
    asyncio.run(provider.close(handle))
    assert asked == ["DELETE /v1/sandboxes/sbx-1"] * 3 and handle.raw["cost"] == {"leased_s": 1.5}


def test_a_broker_gone_for_longer_fails_the_release_naming_it(monkeypatch):
    provider, asked = provider_answering(monkeypatch, [ConnectionRefusedError("refused")] * 50)
    with pytest.raises(SandboxError, match=r"unreachable while releasing sbx-2 \(asked for 1 s\): refused"):
        asyncio.run(provider.close(SandboxHandle(sandbox_id="sbx-2", provider_name="gym_compose", raw={})))
    assert 2 <= len(asked) < 50
