"""The archive folder of `build --save/--load`: names that fit a file system, an index that says what is wrong."""

from __future__ import annotations

import pytest

from gym_compose.engine.images.task_archives import archive_name, load_task_images, read_index
from gym_compose.errors import UserError


def test_archive_names_are_readable_distinct_and_safe():
    first = archive_name("127.0.0.1:5000/swe/sweap-images:django__django-1234")
    other = archive_name("docker.io/swe/sweap-images:django__django-1234")
    by_digest = archive_name("registry.example/swe/sweap-images@sha256:" + "a" * 64)
    assert first.startswith("sweap-images_django__django-1234-") and first.endswith(".tar")
    assert first != other and "/" not in by_digest and ":" not in by_digest and "@" not in by_digest


def test_an_index_that_is_not_one_is_refused_naming_the_file(tmp_path):
    (tmp_path / "index.json").write_text("{not json")
    with pytest.raises(UserError, match="index.json is not an archive index"):
        read_index(tmp_path)
    (tmp_path / "index.json").write_text('{"img:1": "not a mapping"}')
    with pytest.raises(UserError, match="a mapping of image -> archive"):
        read_index(tmp_path)
    assert read_index(tmp_path / "nowhere") == {}


def test_loading_a_folder_without_archives_says_what_to_give(tmp_path):
    with pytest.raises(UserError, match="no such folder"):
        load_task_images(tmp_path / "missing", print)
    with pytest.raises(UserError, match="no index.json there"):
        load_task_images(tmp_path, print)
