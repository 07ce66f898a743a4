"""One `docker image inspect` for many images (image_build.inspect_images, inspected_together),
with the docker CLI replaced by a fake engine that answers as docker does."""

from __future__ import annotations

import json

import pytest

from gym_compose.engine import docker_cli
from gym_compose.engine.docker_cli import DockerResult
from gym_compose.engine.images import image_build


class Engine:
    def __init__(self, *tags: str):
        self.images = {tag: {"Id": f"sha256:{n:064x}", "RepoTags": [tag]} for n, tag in enumerate(tags, 1)}
        self.calls: list[list[str]] = []
        self.answer_out_of_order = False

    def __call__(self, args, *, timeout, retries=0, check=True, on_line=None, env=None):
        args = list(args)
        self.calls.append(args)
        assert args[:2] == ["image", "inspect"]
        found = [self.images[ref] for ref in args[2:] if ref in self.images]
        if self.answer_out_of_order:
            found.reverse()
        missing = [ref for ref in args[2:] if ref not in self.images]
        stderr = "".join(f"Error response from daemon: No such image: {ref}\n" for ref in missing)
        return DockerResult(tuple(args), 1 if missing else 0, json.dumps(found), stderr)


@pytest.fixture
def engine(monkeypatch):
    fake = Engine("p/base:1", "p/server:2")
    monkeypatch.setattr(docker_cli, "run_docker", fake)
    return fake


def test_many_images_are_asked_in_one_call_and_the_missing_named_none(engine):
    answers = image_build.inspect_images(["p/base:1", "p/gone:3", "p/server:2", "p/base:1"])

    assert engine.calls == [["image", "inspect", "p/base:1", "p/gone:3", "p/server:2"]]
    assert list(answers) == ["p/base:1", "p/gone:3", "p/server:2"]
    assert answers["p/base:1"] == engine.images["p/base:1"] and answers["p/server:2"] == engine.images["p/server:2"]
    assert answers["p/gone:3"] is None


def test_answers_that_cannot_be_paired_with_their_names_are_asked_one_by_one(engine):
    engine.answer_out_of_order = True

    answers = image_build.inspect_images(["p/base:1", "p/server:2"])

    assert answers == {"p/base:1": engine.images["p/base:1"], "p/server:2": engine.images["p/server:2"]}
    assert len(engine.calls) == 3


def test_an_engine_error_is_raised_not_taken_for_missing_images(monkeypatch):
    def refused(args, **_):
        return DockerResult(tuple(args), 1, "", "permission denied")

    monkeypatch.setattr(docker_cli, "run_docker", refused)

    with pytest.raises(docker_cli.DockerCommandError):
        image_build.inspect_images(["p/base:1", "p/server:2"])


def test_within_the_block_found_images_are_answered_without_the_engine_missing_ones_asked_again(engine):
    with image_build.inspected_together(["p/base:1", "p/server:2", "p/new:4"]):
        assert image_build.inspect_image("p/base:1") == engine.images["p/base:1"]
        assert image_build.inspect_image("p/server:2") == engine.images["p/server:2"]
        assert len(engine.calls) == 1
        engine.images["p/new:4"] = {"Id": "sha256:" + "4" * 64, "RepoTags": ["p/new:4"]}  # built meanwhile
        assert image_build.inspect_image("p/new:4") == engine.images["p/new:4"]
        assert len(engine.calls) == 2
    del engine.images["p/base:1"]  # after the block the engine is asked again

    assert image_build.inspect_image("p/base:1") is None
    assert len(engine.calls) == 3
