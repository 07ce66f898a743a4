"""A lean-runtime server imports its own modules by their NeMo Gym checkout path."""

from __future__ import annotations

import importlib
import sys

import pytest

from gym_compose.server import compat


@pytest.fixture
def clean_modules():
    yield
    for name in [name for name in sys.modules if name.startswith("resources_servers.bird_sql_like")]:
        del sys.modules[name]
    if "resources_servers" in sys.modules:
        vars(sys.modules["resources_servers"]).pop("bird_sql_like", None)


@pytest.mark.parametrize("with_init", [False, True])
def test_own_modules_import_by_checkout_path(tmp_path, clean_modules, with_init):
    server_dir = tmp_path / "server"  # the lean image's /srv/server: not named after the server
    server_dir.mkdir()
    (server_dir / "eval_utils.py").write_text("def score():\n    return 0.75\n")
    if with_init:
        (server_dir / "__init__.py").write_text("MARKER = 'package init ran'\n")
    compat.install(force=True)
    compat.register_own_package("resources_servers", "bird_sql_like", server_dir)
    module = importlib.import_module("resources_servers.bird_sql_like.eval_utils")
    assert module.score() == 0.75
    assert module.__file__ == str(server_dir / "eval_utils.py")
    package = sys.modules["resources_servers.bird_sql_like"]
    assert getattr(package, "MARKER", None) == ("package init ran" if with_init else None)
    # the compatibility layer's own resources_servers module stays importable beside it
    assert importlib.import_module("resources_servers.gymnasium") is sys.modules["resources_servers.gymnasium"]
