"""Image tags, parent choice and build contexts, with the docker CLI replaced by a fake engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_compose.engine import debian_base, docker_cli, images
from gym_compose.engine.docker_cli import DockerResult
from gym_compose.errors import UserError

NO_HOST = 'Error response from daemon: Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host'


class FakeEngine:
    """Answers the docker commands the image code runs; records them and every build context."""

    def __init__(self, pull_works: bool = True):
        self.images: dict[str, dict] = {}
        self.pull_works = pull_works
        self.calls: list[list[str]] = []
        self.builds: list[dict] = []
        self._ids = 0

    def add(self, tag: str, labels: dict | None = None) -> None:
        self._ids += 1
        self.images[tag] = {"Id": f"sha256:{self._ids:064x}", "Size": 1000 * self._ids, "Config": {"Labels": labels}}

    def commands(self, name: str) -> list[list[str]]:
        return [call for call in self.calls if call[0] == name]

    def __call__(self, args, *, timeout, retries=0, check=True, on_line=None, env=None):
        args = list(args)
        self.calls.append(args)
        if args[:2] == ["image", "inspect"]:
            tag = args[2]
            if tag in self.images:
                return DockerResult(tuple(args), 0, json.dumps([self.images[tag]]), "")
            return DockerResult(tuple(args), 1, "[]", f"Error: No such image: {tag}")
        if args[0] == "pull":
            if self.pull_works:
                self.add(args[-1])
                return DockerResult(tuple(args), 0, "", "")
            return DockerResult(tuple(args), 1, "", NO_HOST)
        if args[0] == "import":
            self.add(args[-1], {"io.gym-compose.image": "debian-python"})
            return DockerResult(tuple(args), 0, "sha256:abc", "")
        if args[0] == "build":
            self._record_build(args, on_line)
            return DockerResult(tuple(args), 0, "", "")
        raise AssertionError(f"unexpected docker command {args}")

    def _record_build(self, args, on_line):
        tag = args[args.index("--tag") + 1]
        context = Path(args[-1])
        build_args = dict(value.split("=", 1) for flag, value in zip(args, args[1:]) if flag == "--build-arg")
        files = sorted(str(path.relative_to(context)) for path in context.rglob("*") if path.is_file())
        self.builds.append(
            {"tag": tag, "args": build_args, "files": files, "dockerfile": (context / "Dockerfile").read_text()}
        )
        on_line("Step 1/2 : FROM x")
        labels = {}
        if tag.startswith("gym-compose/base:"):
            labels = {"io.gym-compose.image.parent": build_args["PARENT_IMAGE"]}
        self.add(tag, labels)


@pytest.fixture
def engine(monkeypatch, tmp_path):
    fake = FakeEngine()
    monkeypatch.setattr(docker_cli, "run_docker", fake)
    monkeypatch.setenv("GYM_COMPOSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GYM_COMPOSE_OFFLINE", raising=False)
    monkeypatch.delenv("GYM_COMPOSE_BASE_IMAGE", raising=False)
    monkeypatch.delenv("GYM_COMPOSE_IMAGE_PREFIX", raising=False)

    def fake_rootfs(settings, rootfs, progress, packages=debian_base.PACKAGES, suite="bookworm"):
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        rootfs.write_bytes(b"rootfs")

    def fake_wheelhouse(requirements, cache_dir, progress, constraints="", find_links=()):
        folder = cache_dir / "fake-wheels"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "fastapi-0.110.0-py3-none-any.whl").write_bytes(b"wheel")
        fake.wheelhouse_requests = getattr(fake, "wheelhouse_requests", []) + [(requirements, constraints)]
        return folder

    monkeypatch.setattr(debian_base, "_make_rootfs", fake_rootfs)
    monkeypatch.setattr(images, "ensure_wheelhouse", fake_wheelhouse)
    return fake


@pytest.fixture
def runtime_requirements(monkeypatch, tmp_path):
    path = tmp_path / "runtime-requirements.txt"
    path.write_text("fastapi\n")
    monkeypatch.setattr(images, "RUNTIME_REQUIREMENTS", path)
    return path


def make_implementation(root: Path, name: str = "tiny_server", requirements: str | None = None) -> Path:
    folder = root / name
    (folder / "data").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "__pycache__").mkdir()
    (folder / "app.py").write_text("APP = 1\n")
    (folder / "data" / "rows.jsonl").write_text('{"q": 1}\n')
    (folder / "tests" / "test_app.py").write_text("def test(): pass\n")
    (folder / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"\0")
    if requirements is not None:
        (folder / "requirements.txt").write_text(requirements)
    return folder


def test_public_image_is_pulled_and_used_when_the_registry_answers(engine, runtime_requirements):
    lines: list[str] = []
    tag = images.ensure_base_image(progress=lines.append)

    assert tag.startswith("gym-compose/base:")
    assert engine.commands("pull") == [["pull", "--quiet", "python:3.11-slim"]]
    assert engine.commands("import") == []
    (build,) = engine.builds
    assert build["args"]["PARENT_IMAGE"] == "python:3.11-slim"
    assert build["args"]["PIP_INSTALL_OPTIONS"] == ""
    assert any("python:3.11-slim" in line for line in lines)


def test_a_failed_pull_takes_the_offline_path_by_itself_and_says_so_in_one_line(engine, runtime_requirements):
    engine.pull_works = False
    lines: list[str] = []
    tag = images.ensure_base_image(progress=lines.append)

    (imported,) = engine.commands("import")
    debian_tag = imported[-1]
    assert debian_tag.startswith("gym-compose/debian-python:")
    (build,) = engine.builds
    assert build["tag"] == tag
    assert build["args"]["PARENT_IMAGE"] == debian_tag
    assert build["args"]["PIP_INSTALL_OPTIONS"] == "--no-index"
    assert "wheels/fastapi-0.110.0-py3-none-any.whl" in build["files"]
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


def test_unchanged_base_is_not_rebuilt_and_keeps_its_tag(engine, runtime_requirements):
    first = images.ensure_base_image(progress=lambda line: None)
    second = images.ensure_base_image(progress=lambda line: None)
    assert first == second
    assert len(engine.builds) == 1


def test_base_tag_changes_with_requirements_and_parent(engine, runtime_requirements):
    first = images.ensure_base_image(progress=lambda line: None)
    runtime_requirements.write_text("fastapi\norjson\n")
    second = images.ensure_base_image(progress=lambda line: None)
    engine.add("python:3.11-slim")  # a newer parent image under the same name
    third = images.ensure_base_image(progress=lambda line: None)
    assert len({first, second, third}) == 3


def test_base_context_holds_runtime_sources_but_not_host_only_modules(engine, runtime_requirements):
    images.ensure_base_image(progress=lambda line: None)
    files = engine.builds[0]["files"]
    assert "gym_compose/server/__init__.py" in files
    assert "gym_compose/collect/__init__.py" in files
    assert not any(name.startswith(("gym_compose/engine/", "gym_compose/config/")) for name in files)
    top_level = {name for name in files if name.count("/") == 1}
    assert top_level == {"gym_compose/__init__.py", "gym_compose/errors.py", "gym_compose/contract.py"}
    assert not any("__pycache__" in name for name in files)


def test_base_dockerfile_sets_user_workdir_entrypoint_and_venv():
    text = (images.DOCKER_DIR / "base.Dockerfile").read_text()
    assert "USER 10001:10001" in text
    assert "WORKDIR /srv/server" in text
    assert "PYTHONUNBUFFERED=1" in text
    assert "PATH=/opt/venv/bin:" in text
    assert 'CMD ["python", "-m", "gym_compose.server"]' in text
    assert f"{images.IMAGE_LABEL}.parent=" in text  # read back by the server build


def test_server_image_copies_files_without_tests_or_caches(engine, runtime_requirements, tmp_path):
    base = images.ensure_base_image(progress=lambda line: None)
    folder = make_implementation(tmp_path)
    tag = images.ensure_server_image(folder, base, progress=lambda line: None)

    assert tag.startswith("gym-compose/tiny_server:")
    build = engine.builds[-1]
    assert build["args"]["BASE_IMAGE"] == base
    assert "server/app.py" in build["files"] and "server/data/rows.jsonl" in build["files"]
    assert not any("tests" in name or "__pycache__" in name for name in build["files"])
    assert build["dockerfile"] == images.server_dockerfile(has_requirements=False)
    assert "pip install" not in build["dockerfile"]


def test_server_tag_ignores_tests_and_caches_but_follows_files_and_base(engine, runtime_requirements, tmp_path):
    base = images.ensure_base_image(progress=lambda line: None)
    folder = make_implementation(tmp_path)
    first = images.ensure_server_image(folder, base, progress=lambda line: None)
    (folder / "tests" / "test_more.py").write_text("x = 2\n")
    (folder / "__pycache__" / "other.pyc").write_bytes(b"1")
    assert images.ensure_server_image(folder, base, progress=lambda line: None) == first
    assert len(engine.builds) == 2

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

    build = engine.builds[-1]
    assert build["args"]["PIP_INSTALL_OPTIONS"] == "--no-index"
    assert build["dockerfile"] == images.server_dockerfile(has_requirements=True)
    assert any(name.startswith("wheels/") for name in build["files"])
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
    from gym_compose.engine.wheelhouse import _missing_distribution

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
    from gym_compose.engine.wheelhouse import _missing_distribution

    conflict = ("The conflict is caused by:\n    reasoning-gym 0.1.25 depends on zss>=1.2.0\n"
                "    reasoning-gym 0.1.24 depends on zss>=1.2.0\n\n")
    assert _missing_distribution(conflict) == "zss>=1.2.0"
    clash = ("The conflict is caused by:\n    datasets 4.0.0 depends on fsspec<=2025.3.0\n"
             "    The user requested (constraint) fsspec==2025.9.0\n")
    assert _missing_distribution(clash) is None


def test_a_clash_between_dependencies_is_not_taken_for_a_missing_wheel():
    from gym_compose.engine.wheelhouse import _missing_distribution

    # evalplus: google-generativeai's protobuf<5 against the runtime's google-api-core (protobuf>=6.33.5)
    clash = ("The conflict is caused by:\n    google-generativeai 0.7.2 depends on protobuf\n"
             "    google-ai-generativelanguage 0.6.6 depends on protobuf!=3.20.0, <5.0.0dev and >=3.19.5\n"
             "    google-api-core 2.44.0 depends on protobuf<8.0.0 and >=6.33.5\n")
    assert _missing_distribution(clash) is None
