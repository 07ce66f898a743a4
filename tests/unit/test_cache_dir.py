"""The run-level cache_dir: NeMo Gym 0.7's default and normalisation on the host, the containers'
own folder in their copy of the config."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gym_compose.config import ConfigRequest, load
from gym_compose.contract import CONTAINER_CACHE_DIR
from gym_compose.errors import UserError
from gym_compose.plan.planner import plan_stack

# finance_sec_search's config reads the run-level key the same way
SERVER = """
search:
  resources_servers:
    search_impl:
      entrypoint: app.py
      domain: agent
      cache_dir: ${oc.select:cache_dir,null}
"""


def loaded(tmp_path: Path, *overrides: str) -> dict:
    (tmp_path / "server.yaml").write_text(textwrap.dedent(SERVER))
    return load(ConfigRequest(config_files=[Path("server.yaml")], overrides=list(overrides)), cwd=tmp_path).data


def test_cache_dir_defaults_to_the_working_directorys_cache_before_interpolation(tmp_path):
    data = loaded(tmp_path)
    expected = str((tmp_path / "cache").resolve())
    assert data["cache_dir"] == expected
    assert data["search"]["resources_servers"]["search_impl"]["cache_dir"] == expected  # not null


def test_a_given_cache_dir_is_made_absolute_against_the_working_directory(tmp_path):
    data = loaded(tmp_path, "++cache_dir=shared/../caches")
    assert data["cache_dir"] == str((tmp_path / "caches").resolve())
    assert data["search"]["resources_servers"]["search_impl"]["cache_dir"] == data["cache_dir"]
    assert loaded(tmp_path, "++cache_dir=/abs/c")["cache_dir"] == "/abs/c"


def test_an_empty_cache_dir_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="cache_dir must be a non-empty path"):
        loaded(tmp_path, "++cache_dir=")


def test_containers_get_their_own_cache_folder_and_the_host_view_keeps_the_host_path(tmp_path):
    impl = tmp_path / "server_images" / "search_impl"
    impl.mkdir(parents=True)
    (impl / "app.py").write_text("print('hi')\n")
    data = loaded(tmp_path)
    data["search"]["resources_servers"]["search_impl"]["index"] = data["cache_dir"] + "/index.db"
    stack = plan_stack(data, [tmp_path])
    spec = stack.network_config["search"]["resources_servers"]["search_impl"]
    assert stack.network_config["cache_dir"] == CONTAINER_CACHE_DIR
    assert spec["cache_dir"] == CONTAINER_CACHE_DIR and spec["index"] == CONTAINER_CACHE_DIR + "/index.db"
    assert stack.host_config["cache_dir"] == data["cache_dir"]
