"""The manifest's engine answers, asked in the background while the collector runs."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from gym_compose.engine import engine_info
from gym_compose.engine.docker_cli import DockerCommandError, DockerResult
from gym_compose.runs import manifest

ENGINE = {"engine": "20.10", "api": "1.41", "os": "linux", "arch": "amd64", "compose": "2.40"}


def test_the_images_are_asked_in_one_call_and_a_missing_one_is_recorded_as_none(monkeypatch):
    asked: list[list[str]] = []

    def inspect(tags):
        asked.append(list(tags))
        return {tag: None if tag == "gone:1" else {"Id": "sha256:" + tag} for tag in tags}

    monkeypatch.setattr(manifest, "inspect_images", inspect)
    monkeypatch.setattr(engine_info, "engine_versions", lambda: ENGINE)
    facts = manifest.EngineFacts({"head": "base:1", "agent": "base:1", "env": "env:1", "old": "gone:1"})
    digests, engine = facts.result()
    assert asked == [["base:1", "env:1", "gone:1"]]
    assert digests == {"agent": {"image": "base:1", "id": "sha256:base:1"},
                       "env": {"image": "env:1", "id": "sha256:env:1"},
                       "head": {"image": "base:1", "id": "sha256:base:1"},
                       "old": {"image": "gone:1", "id": None}}
    assert engine == ENGINE


def test_an_engine_that_cannot_answer_leaves_the_ids_empty_not_the_manifest_unwritten(monkeypatch):
    def refused(tags):
        raise DockerCommandError(DockerResult(("image", "inspect", *tags), 1, "", "permission denied"))

    monkeypatch.setattr(manifest, "inspect_images", refused)
    monkeypatch.setattr(engine_info, "engine_versions", lambda: ENGINE)
    digests, _ = manifest.EngineFacts({"head": "base:1"}).result()
    assert digests == {"head": {"image": "base:1", "id": None}}


def test_a_failed_background_ask_is_asked_again_when_the_manifest_is_written(monkeypatch, tmp_path):
    calls = {"n": 0}

    def inspect(tags):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("engine hiccup")
        return {tag: {"Id": "sha256:abc"} for tag in tags}

    monkeypatch.setattr(manifest, "inspect_images", inspect)
    monkeypatch.setattr(engine_info, "engine_versions", lambda: ENGINE)
    facts = manifest.EngineFacts({"head": "base:1"})
    started = datetime.now(timezone.utc)
    manifest.write_manifest(tmp_path, {"k": 1}, None, {"head": "base:1"}, started, 0, None, facts)
    written = json.loads((tmp_path / manifest.MANIFEST_FILE).read_text())
    assert written["images"] == {"head": {"image": "base:1", "id": "sha256:abc"}}
    assert written["collector_exit_code"] == 0 and calls["n"] == 2
