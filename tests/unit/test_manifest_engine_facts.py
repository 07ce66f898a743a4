"""The manifest's engine answers, asked in the background while the collector runs."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from gym_compose.engine import engine_info
from gym_compose.errors import UserError
from gym_compose.runs import manifest

ENGINE = {"engine": "20.10", "api": "1.41", "os": "linux", "arch": "amd64", "compose": "2.40"}


def test_each_image_is_asked_once_and_a_missing_one_is_recorded_as_none(monkeypatch):
    asked: list[str] = []

    def digest(tag: str) -> str:
        asked.append(tag)
        if tag == "gone:1":
            raise UserError("Image gone:1 does not exist.")
        return "sha256:" + tag

    monkeypatch.setattr(manifest, "image_digest", digest)
    monkeypatch.setattr(engine_info, "engine_versions", lambda: ENGINE)
    facts = manifest.EngineFacts({"head": "base:1", "agent": "base:1", "env": "env:1", "old": "gone:1"})
    digests, engine = facts.result()
    assert sorted(asked) == ["base:1", "env:1", "gone:1"]
    assert digests == {"agent": {"image": "base:1", "id": "sha256:base:1"},
                       "env": {"image": "env:1", "id": "sha256:env:1"},
                       "head": {"image": "base:1", "id": "sha256:base:1"},
                       "old": {"image": "gone:1", "id": None}}
    assert engine == ENGINE


def test_a_failed_background_ask_is_asked_again_when_the_manifest_is_written(monkeypatch, tmp_path):
    calls = {"n": 0}

    def digest(tag: str) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("engine hiccup")
        return "sha256:abc"

    monkeypatch.setattr(manifest, "image_digest", digest)
    monkeypatch.setattr(engine_info, "engine_versions", lambda: ENGINE)
    facts = manifest.EngineFacts({"head": "base:1"})
    started = datetime.now(timezone.utc)
    manifest.write_manifest(tmp_path, {"k": 1}, None, {"head": "base:1"}, started, 0, None, facts)
    written = json.loads((tmp_path / manifest.MANIFEST_FILE).read_text())
    assert written["images"] == {"head": {"image": "base:1", "id": "sha256:abc"}}
    assert written["collector_exit_code"] == 0 and calls["n"] == 2
