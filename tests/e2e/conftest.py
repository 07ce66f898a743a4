"""Fixtures the end-to-end tests share."""

from __future__ import annotations

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.e2e import remove_project


@pytest.fixture
def project(request) -> str:
    name = f"{PROJECT_PREFIX}-{request.node.name.replace('_', '-')[:30].lower()}"
    yield name
    remove_project(name)
