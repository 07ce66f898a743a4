"""What a server folder asks pip for: requirements.txt, or pyproject's dependencies where their
`[tool.uv.sources]` say (NeMo Gym installs these folders with uv)."""

from __future__ import annotations

import pytest

from gym_compose.engine.images import wheelhouse
from gym_compose.errors import UserError
from gym_compose.plan.requirements import server_requirements


def folder_with_pyproject(tmp_path, dependencies: list[str], sources: str = ""):
    listed = ", ".join(f'"{line}"' for line in dependencies)
    text = f'[project]\nname = "srv"\ndependencies = [{listed}]\n'
    if sources:
        text += f"\n[tool.uv.sources]\n{sources}\n"
    (tmp_path / "pyproject.toml").write_text(text)
    return tmp_path


def test_a_git_source_is_installed_from_git_not_from_a_namesake_on_the_index(tmp_path):
    # code_fim's own pyproject: PyPI's human-eval-infilling is an empty package of someone else's
    folder = folder_with_pyproject(tmp_path, ["nemo-gym[dev]", "human-eval-infilling", "numpy>=2"], (
        'nemo-gym = { path = "../..", editable = true }\n'
        'human-eval-infilling = { git = "https://github.com/wasiahmad/human-eval-infilling.git" }'))
    assert server_requirements(folder) == (
        "human-eval-infilling @ git+https://github.com/wasiahmad/human-eval-infilling.git\nnumpy>=2\n")


@pytest.mark.parametrize(("source", "expected"), [
    ('{ git = "https://example.org/r.git", rev = "855727", subdirectory = "envs/echo" }',
     "git+https://example.org/r.git@855727#subdirectory=envs/echo"),
    ('{ git = "https://example.org/r.git", tag = "v1.2" }', "git+https://example.org/r.git@v1.2"),
    ('{ git = "https://example.org/r.git", branch = "splits" }', "git+https://example.org/r.git@splits"),
    ('{ url = "https://example.org/pkg-1.0.tar.gz" }', "https://example.org/pkg-1.0.tar.gz"),
])
def test_each_kind_of_fetched_source_becomes_a_direct_reference_keeping_extras_and_markers(tmp_path, source, expected):
    folder = folder_with_pyproject(tmp_path, ["Tale_Suite[all]>=1; python_version >= '3.12'"], f"tale-suite = {source}")
    assert server_requirements(folder) == f'Tale_Suite[all] @ {expected} ; python_version >= "3.12"\n'


@pytest.mark.parametrize(("source", "named"), [
    ('{ path = "vendor/pkg" }', "'path' source"),
    ('{ index = "pytorch" }', "'index' source"),
    ('[{ git = "https://example.org/a.git", marker = "sys_platform == \'linux\'" }, { url = "https://x/y.whl" }]',
     "several sources"),
])
def test_a_source_the_build_cannot_follow_is_an_error_naming_file_and_package(tmp_path, source, named):
    folder = folder_with_pyproject(tmp_path, ["pkg"], f"pkg = {source}")
    with pytest.raises(UserError) as caught:
        server_requirements(folder)
    assert f"{folder / 'pyproject.toml'}: [tool.uv.sources] pkg" in str(caught.value)
    assert named in str(caught.value)


def test_an_offline_build_that_cannot_fetch_a_git_requirement_names_it(tmp_path, monkeypatch):
    import subprocess

    failed = subprocess.CompletedProcess([], 1, "", "ERROR: Failed to build 'h' when git clone https://github.com/x/h.git")
    monkeypatch.setattr(wheelhouse, "_run_pip", lambda command: failed)
    requirements = "numpy>=2\nh @ git+https://github.com/x/h.git\nhttps://example.org/w-1.0-py3-none-any.whl\n"
    with pytest.raises(UserError) as caught:
        wheelhouse.ensure_wheelhouse(requirements, tmp_path, progress=lambda line: None)
    message = str(caught.value)
    assert "outside the package index" in message and "git clone" in message
    assert "    h @ git+https://github.com/x/h.git\n    https://example.org/w-1.0-py3-none-any.whl\n" in message
    assert "numpy" not in message.split("pip said")[0]  # an index package is not named as fetched elsewhere
    assert not list((tmp_path / "wheels").glob("*/*.whl"))  # nothing half-made is published
