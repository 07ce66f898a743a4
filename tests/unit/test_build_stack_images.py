"""build_stack_images: one image per distinct server folder, independent ones built side by side."""

from __future__ import annotations

import threading
import time

from gym_compose.engine.images import build
from gym_compose.engine.images import lean_images as images
from gym_compose.plan.model import Service, Stack, StackOptions


def test_independent_server_images_are_built_at_once_and_each_folder_once(monkeypatch, tmp_path):
    running, most, calls = 0, 0, []
    lock = threading.Lock()

    def fake_server_image(folder, base_tag, progress=print, extra_requirements=()):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            calls.append(folder.name)
        time.sleep(0.2)
        with lock:
            running -= 1
        return f"img/{folder.name}:1"

    monkeypatch.setattr(images, "ensure_base_image", lambda progress=print: "img/base:1")
    monkeypatch.setattr(images, "ensure_server_image", fake_server_image)
    monkeypatch.setattr(images, "expected_tags", lambda folders: [])  # the engine is not asked
    folders = {name: tmp_path / name for name in ("alpha", "beta")}
    for folder in folders.values():
        folder.mkdir()
    services = [
        Service("head", "head"),
        Service("alpha-env", "environment", source_dir=folders["alpha"]),
        Service("beta-res", "resources", source_dir=folders["beta"]),
        Service("alpha-env-2", "environment", source_dir=folders["alpha"]),
        Service("vllm", "engine", image="vllm/vllm-openai:v1"),
    ]
    stack = Stack("p", services, {}, {}, {}, StackOptions())

    result = build.build_stack_images(stack, progress=lambda line: None)

    assert list(result) == ["base", "head", "alpha-env", "beta-res", "alpha-env-2", "vllm"]
    assert result == {"base": "img/base:1", "head": "img/base:1", "alpha-env": "img/alpha:1",
                      "beta-res": "img/beta:1", "alpha-env-2": "img/alpha:1", "vllm": "vllm/vllm-openai:v1"}
    assert sorted(calls) == ["alpha", "beta"] and most == 2
