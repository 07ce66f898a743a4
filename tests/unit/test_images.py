"""Image tags, parent choice and build contexts, with the docker CLI replaced by a fake engine."""

from __future__ import annotations

import os

import pytest

from gym_compose.engine import docker_cli
from gym_compose.engine.docker_cli import DockerResult
from gym_compose.engine.images import lean_images as images
from gym_compose.engine.images import saved_images
from gym_compose.errors import UserError
from tests.support.image_engine import make_implementation


def test_public_image_is_pulled_and_used_when_the_registry_answers(engine, runtime_requirements):
    lines: list[str] = []
    tag = images.ensure_base_image(progress=lines.append)

    assert tag.startswith("gym-compose/base:")
    assert engine.commands("pull") == [["pull", "--quiet", "python:3.11-slim"]]
    assert engine.commands("import") == []
    assert engine.builds == []  # no Dockerfile: two committed containers
    venv, runtime = engine.commits
    assert venv["parent"] == "python:3.11-slim" and venv["tag"].startswith("gym-compose/base-venv:")
    assert venv["command"] == ["sh", "/tmp/gym-compose-build/base-venv.sh", "3.11", ""]
    assert runtime["parent"] == venv["tag"] and runtime["tag"] == tag
    assert runtime["command"] == ["sh", "/tmp/gym-compose-build/base-runtime.sh"]
    assert any("python:3.11-slim" in line for line in lines)


def test_a_failed_pull_takes_the_offline_path_by_itself_and_says_so_in_one_line(engine, runtime_requirements):
    engine.pull_works = False
    lines: list[str] = []
    tag = images.ensure_base_image(progress=lines.append)

    (imported,) = engine.commands("import")
    debian_tag = imported[-1]
    assert debian_tag.startswith("gym-compose/debian-python:")
    venv, runtime = engine.commits
    assert runtime["tag"] == tag
    assert venv["parent"] == debian_tag
    assert venv["command"][2:] == ["3.11", "--no-index"]
    assert "/tmp/gym-compose-build/wheels/fastapi-0.110.0-py3-none-any.whl" in venv["files"]
    assert f"LABEL io.gym-compose.image=base io.gym-compose.image.parent={debian_tag} " \
        "io.gym-compose.image.prefix=gym-compose" in runtime["changes"]
    assert set(engine.wheelhouse_requests) == {("fastapi\n", "")}
    path_lines = [line for line in lines if "cannot pull" in line]
    assert len(path_lines) == 1 and "no such host" in path_lines[0] and "offline" in path_lines[0]


def test_offline_env_var_skips_the_pull(engine, runtime_requirements, monkeypatch):
    monkeypatch.setenv("GYM_COMPOSE_OFFLINE", "1")
    images.ensure_base_image(progress=lambda line: None)
    assert engine.commands("pull") == []
    assert len(engine.commands("import")) == 1


def test_base_image_override_is_pulled_instead_of_the_default(engine, runtime_requirements, monkeypatch):
    monkeypatch.setenv("GYM_COMPOSE_BASE_IMAGE", "registry.example/python:3.11")
    images.ensure_base_image(progress=lambda line: None)
    assert engine.commands("pull") == [["pull", "--quiet", "registry.example/python:3.11"]]


def test_a_local_public_image_is_used_without_pulling(engine, runtime_requirements):
    engine.add("python:3.11-slim")
    images.ensure_base_image(progress=lambda line: None)
    assert engine.commands("pull") == []


def test_a_built_offline_base_is_found_with_the_stacks_one_inspect_without_asking_again(engine, runtime_requirements):
    """`up` and `eval run` ask the engine about every expected image in one call; that the public
    Python image is not local is not asked a second time on the way to the collector's start."""
    from gym_compose.engine.images.image_build import inspected_together

    engine.pull_works = False
    tag = images.ensure_base_image(progress=lambda line: None)
    saved_images.wait_for_saves()
    engine.calls.clear()
    with inspected_together(images.expected_tags([])):
        assert images.ensure_base_image(progress=lambda line: None) == tag
    assert engine.calls == [["image", "inspect", "python:3.11-slim", tag]], engine.calls


def test_unchanged_base_is_not_rebuilt_and_keeps_its_tag(engine, runtime_requirements):
    first = images.ensure_base_image(progress=lambda line: None)
    second = images.ensure_base_image(progress=lambda line: None)
    assert first == second
    assert len(engine.commits) == 2


def test_base_tag_changes_with_requirements_and_parent(engine, runtime_requirements):
    first = images.ensure_base_image(progress=lambda line: None)
    runtime_requirements.write_text("fastapi\norjson\n")
    second = images.ensure_base_image(progress=lambda line: None)
    engine.add("python:3.11-slim")  # a newer parent image under the same name
    third = images.ensure_base_image(progress=lambda line: None)
    assert len({first, second, third}) == 3


def test_base_context_holds_runtime_sources_but_not_host_only_modules(engine, runtime_requirements):
    images.ensure_base_image(progress=lambda line: None)
    prefix = "/tmp/gym-compose-build/"
    files = [name.removeprefix(prefix) for name in engine.commits[1]["files"]]
    assert "gym_compose/server/__init__.py" in files
    assert "gym_compose/collect/__init__.py" in files
    assert not any(name.startswith(("gym_compose/engine/", "gym_compose/config/")) for name in files)
    top_level = {name for name in files if name.count("/") == 1 and name.startswith("gym_compose/")}
    assert top_level == {"gym_compose/__init__.py", "gym_compose/errors.py", "gym_compose/contract.py"}
    assert not any("__pycache__" in name for name in files)


def test_base_commit_sets_user_workdir_command_and_venv(engine, runtime_requirements):
    images.ensure_base_image(progress=lambda line: None)
    changes = engine.commits[-1]["changes"]
    assert "USER 10001:10001" in changes
    assert "WORKDIR /srv/server" in changes
    assert 'CMD ["python", "-m", "gym_compose.server"]' in changes
    (env,) = [change for change in changes if change.startswith("ENV ")]
    assert "PYTHONUNBUFFERED=1" in env.split() and "ENV PATH=/opt/venv/bin:" in env
    assert any(f"{images.IMAGE_LABEL}.parent=python:3.11-slim" in change for change in changes)  # read back
    venv_config = images.inspect_image(engine.commits[0]["tag"])["Config"]
    assert venv_config["Cmd"] == ["python3"] and venv_config["User"] == "root"  # the parent's, not the script


def test_an_edit_to_the_runtime_package_rebuilds_only_the_runtime_half(engine, runtime_requirements, monkeypatch):
    first = images.ensure_base_image(progress=lambda line: None)
    inputs = images.BaseInputs.read()
    monkeypatch.setattr(images.BaseInputs, "read", classmethod(
        lambda cls: images.BaseInputs(inputs.venv_script, inputs.runtime_script + "# edited\n", inputs.changes,
                                      inputs.requirements, inputs.sources)))
    second = images.ensure_base_image(progress=lambda line: None)
    assert second != first
    assert [commit["command"][1].rsplit("/", 1)[-1] for commit in engine.commits] == [
        "base-venv.sh", "base-runtime.sh", "base-runtime.sh"]
    assert engine.commits[2]["parent"] == engine.commits[0]["tag"]


def test_a_removed_base_is_loaded_from_the_host_cache_without_import_or_build(engine, runtime_requirements,
                                                                                monkeypatch):
    monkeypatch.setenv("GYM_COMPOSE_OFFLINE", "1")
    tag = images.ensure_base_image(progress=lambda line: None)
    saved_images.wait_for_saves()  # the archive is written in the background
    assert len(engine.commands("save")) == 1
    engine.images.clear()  # `docker image prune -a`
    lines: list[str] = []
    assert images.ensure_base_image(progress=lines.append) == tag
    assert images.image_exists(tag)
    assert len(engine.commands("load")) == 1 and any(line.startswith(f"loaded {tag} from ") for line in lines)
    assert len(engine.commands("import")) == 1 and len(engine.commits) == 2  # the first build's only


def test_a_damaged_archive_is_dropped_and_the_base_rebuilt(engine, runtime_requirements, monkeypatch):
    from gym_compose.engine.images.image_settings import ImageSettings

    monkeypatch.setenv("GYM_COMPOSE_OFFLINE", "1")
    tag = images.ensure_base_image(progress=lambda line: None)
    saved_images.wait_for_saves()
    saved_images.archive_path(ImageSettings.from_env(), tag).write_text("{}")  # loads nothing
    engine.images.clear()
    assert images.ensure_base_image(progress=lambda line: None) == tag
    saved_images.wait_for_saves()
    assert len(engine.commits) == 4 and len(engine.commands("save")) == 2


def test_only_the_newest_archives_of_an_image_are_kept(engine, tmp_path, monkeypatch):
    from gym_compose.engine.images.image_settings import ImageSettings

    settings = ImageSettings.from_env()
    tags = [f"gym-compose/base:{index:016x}" for index in range(saved_images.KEEP + 2)]
    for age, tag in enumerate(tags):
        engine.add(tag)
        saved_images.save(settings, tag, lambda line: None)
        archive = saved_images.archive_path(settings, tag)
        os.utime(archive, (1000 + age, 1000 + age))
    engine.add("gym-compose/other:1")
    saved_images.save(settings, "gym-compose/other:1", lambda line: None)
    kept = sorted(path.name for path in (settings.cache_dir / "images").iterdir())
    newest = [saved_images.archive_path(settings, tag).name for tag in tags[-saved_images.KEEP:]]
    assert kept == sorted([*newest, "gym-compose+other-1.tar"])


def test_server_image_copies_files_without_tests_or_caches(engine, runtime_requirements, tmp_path):
    base = images.ensure_base_image(progress=lambda line: None)
    folder = make_implementation(tmp_path)
    tag = images.ensure_server_image(folder, base, progress=lambda line: None)

    assert tag.startswith("gym-compose/tiny_server:")
    assert engine.builds == []  # no requirements: the files copied into a container of the base, committed
    commit = engine.commits[-1]
    assert commit["tag"] == tag and commit["parent"] == base and commit["command"] == []
    assert "/srv/server/app.py" in commit["files"] and "/srv/server/data/rows.jsonl" in commit["files"]
    assert not any("tests" in name or "__pycache__" in name for name in commit["files"])
    assert commit["changes"] == [f"LABEL io.gym-compose.image=server io.gym-compose.image.base={base}"]
    assert images.inspect_image(tag)["Config"]["User"] == "10001:10001"  # the base's, as nothing ran


def test_server_tag_ignores_tests_and_caches_but_follows_files_and_base(engine, runtime_requirements, tmp_path):
    base = images.ensure_base_image(progress=lambda line: None)
    folder = make_implementation(tmp_path)
    first = images.ensure_server_image(folder, base, progress=lambda line: None)
    (folder / "tests" / "test_more.py").write_text("x = 2\n")
    (folder / "__pycache__" / "other.pyc").write_bytes(b"1")
    assert images.ensure_server_image(folder, base, progress=lambda line: None) == first
    assert len(engine.commits) == 3  # the base's two and the server's one

    (folder / "data" / "rows.jsonl").write_text('{"q": 2}\n')
    changed = images.ensure_server_image(folder, base, progress=lambda line: None)
    engine.add("gym-compose/base:other", {})
    rebased = images.ensure_server_image(folder, "gym-compose/base:other", progress=lambda line: None)
    assert len({first, changed, rebased}) == 3


def test_offline_server_requirements_come_from_a_host_wheelhouse_pinned_to_the_runtime(
    engine, runtime_requirements, tmp_path, monkeypatch
):
    monkeypatch.setenv("GYM_COMPOSE_OFFLINE", "1")
    base = images.ensure_base_image(progress=lambda line: None)
    folder = make_implementation(tmp_path, requirements="nemo-gym[dev] @ ../../\n# pinned\nsympy==1.13\n")
    images.ensure_server_image(folder, base, progress=lambda line: None)

    assert engine.builds == []  # one container: the files, then server-requirements.sh; committed
    commit = engine.commits[-1]
    assert commit["parent"] == base
    assert commit["command"] == ["sh", "/tmp/gym-compose-build/server-requirements.sh", "--no-index"]
    assert "/tmp/gym-compose-build/wheels/fastapi-0.110.0-py3-none-any.whl" in commit["files"]
    assert "/tmp/gym-compose-build/requirements.txt" in commit["files"] and "/srv/server/app.py" in commit["files"]
    assert "USER 10001:10001" in commit["changes"]  # the script ran as root; the image runs as the base's user
    config = images.inspect_image(commit["tag"])["Config"]
    assert config["Cmd"] == ["python", "-m", "gym_compose.server"]  # the base's, not the script
    requirements, constraints = engine.wheelhouse_requests[-1]
    assert requirements == "sympy==1.13\n"
    assert "fastapi==0.110.0" in constraints


def test_requirements_file_with_only_comments_counts_as_empty(tmp_path):
    folder = make_implementation(tmp_path, requirements="# nothing\n\n-e nemo_gym @ ../..\n")
    assert images.server_requirements(folder) == ""


def test_missing_implementation_folder_is_a_user_error(engine, tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        images.ensure_server_image(tmp_path / "nope", "gym-compose/base:x", progress=lambda line: None)


def test_server_build_on_a_missing_base_is_a_user_error(engine, tmp_path):
    folder = make_implementation(tmp_path)
    with pytest.raises(UserError, match="Base image gym-compose/base:gone does not exist"):
        images.ensure_server_image(folder, "gym-compose/base:gone", progress=lambda line: None)


@pytest.mark.parametrize(
    ("folder", "expected"), [("example_single_tool_call", "example_single_tool_call"), ("My Server!", "my-server")]
)
def test_image_names_are_valid_docker_repository_names(folder, expected):
    assert images.image_name(folder) == expected


def test_image_digest_and_size_read_the_local_image(engine):
    engine.add("gym-compose/x:1")
    assert images.image_digest("gym-compose/x:1").startswith("sha256:")
    assert images.image_size("gym-compose/x:1") > 0
    assert images.image_exists("gym-compose/x:1")
    assert not images.image_exists("gym-compose/x:2")
    with pytest.raises(UserError, match="does not exist"):
        images.image_digest("gym-compose/x:2")


def test_an_up_to_date_offline_base_is_reused_without_another_pull(engine, runtime_requirements):
    engine.pull_works = False
    first = images.ensure_base_image(progress=lambda line: None)
    second = images.ensure_base_image(progress=lambda line: None)
    assert first == second
    assert len(engine.commands("pull")) == 1

    runtime_requirements.write_text("fastapi\nhttpx\n")  # stale: try the registry again
    images.ensure_base_image(progress=lambda line: None)
    assert len(engine.commands("pull")) == 2
    assert len(engine.commands("import")) == 1  # the Debian parent is kept


def test_image_prefix_setting_names_every_image(engine, runtime_requirements, tmp_path, monkeypatch):
    monkeypatch.setenv("GYM_COMPOSE_IMAGE_PREFIX", "ci-42")
    monkeypatch.setenv("GYM_COMPOSE_OFFLINE", "1")
    base = images.ensure_base_image(progress=lambda line: None)
    server = images.ensure_server_image(make_implementation(tmp_path), base, progress=lambda line: None)
    (imported,) = engine.commands("import")
    assert imported[-1].startswith("ci-42/debian-python:")
    assert "LABEL io.gym-compose.image=debian-python io.gym-compose.image.prefix=ci-42" in imported
    assert base.startswith("ci-42/base:") and server.startswith("ci-42/tiny_server:")


def test_a_pinned_dependency_without_wheels_is_found_in_pips_conflict_report():
    from gym_compose.engine.images.wheelhouse import _missing_distribution

    named = "ERROR: Could not find a version that satisfies the requirement zss>=1.2 (from x)\n"
    assert _missing_distribution(named) == "zss>=1.2"
    conflict = ("ERROR: Cannot install -r requirements.txt (line 1) because these package versions have "
                "conflicting dependencies.\n\nThe conflict is caused by:\n"
                "    reasoning-gym 0.1.25 depends on cellpylib==2.4.0\n"
                "    reasoning-gym 0.1.24 depends on cellpylib==2.4.0\n\nTo fix this you could try to:\n")
    assert _missing_distribution(conflict) == "cellpylib==2.4.0"
    assert _missing_distribution(conflict.replace("0.1.24 depends on cellpylib==2.4.0",
                                                  "0.1.24 depends on sympy==1.0")) is None


def test_a_ranged_dependency_without_wheels_is_missing_unless_a_constraint_clashes():
    from gym_compose.engine.images.wheelhouse import _missing_distribution

    conflict = ("The conflict is caused by:\n    reasoning-gym 0.1.25 depends on zss>=1.2.0\n"
                "    reasoning-gym 0.1.24 depends on zss>=1.2.0\n\n")
    assert _missing_distribution(conflict) == "zss>=1.2.0"
    clash = ("The conflict is caused by:\n    datasets 4.0.0 depends on fsspec<=2025.3.0\n"
             "    The user requested (constraint) fsspec==2025.9.0\n")
    assert _missing_distribution(clash) is None


def test_a_clash_between_dependencies_is_not_taken_for_a_missing_wheel():
    from gym_compose.engine.images.wheelhouse import _missing_distribution

    # evalplus: google-generativeai's protobuf<5 against the runtime's google-api-core (protobuf>=6.33.5)
    clash = ("The conflict is caused by:\n    google-generativeai 0.7.2 depends on protobuf\n"
             "    google-ai-generativelanguage 0.6.6 depends on protobuf!=3.20.0, <5.0.0dev and >=3.19.5\n"
             "    google-api-core 2.44.0 depends on protobuf<8.0.0 and >=6.33.5\n")
    assert _missing_distribution(clash) is None


def test_a_failing_build_script_names_its_last_lines_and_leaves_no_container(engine, runtime_requirements,
                                                                             monkeypatch):
    from gym_compose.engine.images import committed_image

    def failing(args, **kwargs):
        if args[0] == "start":
            for line in ("Processing /tmp/wheels/fastapi", "ERROR: No matching distribution found for orjson"):
                kwargs["on_line"](line)
            return DockerResult(tuple(args), 1, "", "")
        return engine(args, **kwargs)

    monkeypatch.setattr(docker_cli, "run_docker", failing)
    with pytest.raises(UserError, match=r"(?s)base-venv\.sh.*exited 1.*No matching distribution found for orjson"):
        images.ensure_base_image(progress=lambda line: None)
    created = [call[call.index("--name") + 1] for call in engine.commands("create")]
    removed = [call[-1] for call in engine.commands("rm")]
    assert created == removed and engine.commits == []
    assert committed_image.STAGING == "/tmp/gym-compose-build"  # where base-venv.sh looks
    assert f"build={committed_image.STAGING}" in (images.DOCKER_DIR / "base-venv.sh").read_text()


def test_without_a_registry_a_saved_offline_base_is_loaded_before_any_pull(engine, runtime_requirements):
    engine.pull_works = False
    tag = images.ensure_base_image(progress=lambda line: None)
    saved_images.wait_for_saves()
    engine.images.clear()
    assert images.ensure_base_image(progress=lambda line: None) == tag
    assert len(engine.commands("pull")) == 1 and len(engine.commands("load")) == 1  # the first call's pull only


def test_the_default_sandbox_image_is_one_committed_container_with_its_user_and_workdir(engine, runtime_requirements):
    from gym_compose.engine.images.sandbox_images import ensure_default_sandbox_image

    base = images.ensure_base_image(progress=lambda line: None)
    tag = ensure_default_sandbox_image(base, progress=lambda line: None)
    assert engine.builds == []
    commit = engine.commits[-1]
    assert commit["tag"] == tag and commit["parent"] == base
    assert commit["command"] == ["sh", "/tmp/gym-compose-build/sandbox.sh"]
    assert commit["changes"] == ["ENV HOME=/work", "USER 10002:10002", "WORKDIR /work", 'CMD ["/bin/sh"]',
                                 f"LABEL io.gym-compose.image=sandbox io.gym-compose.image.base={base}"]
    assert ensure_default_sandbox_image(base, progress=lambda line: None) == tag and len(engine.commits) == 3


def test_every_module_the_containers_import_ships_in_the_base_image():
    """Code under server/, collect/, sandbox/, net/ and metrics/ runs in containers, whose base image
    holds only CONTAINER_MODULES of the package: an import of anything else fails there, not here."""
    import ast

    from gym_compose.engine.images.lean_images import CONTAINER_MODULES, PACKAGE_DIR

    missing = set()
    for part in ("server", "collect", "sandbox", "net", "metrics"):
        for path in (PACKAGE_DIR / part).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gym_compose."):
                    top = node.module.split(".")[1]
                    if top not in CONTAINER_MODULES and f"{top}.py" not in CONTAINER_MODULES:
                        missing.add(f"{path.relative_to(PACKAGE_DIR)}: {node.module}")
    assert not missing, sorted(missing)
