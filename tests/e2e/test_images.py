"""Real builds on the Docker engine: the offline base, and server images on top of it."""

from __future__ import annotations

import pytest

from gym_compose.engine import docker_cli
from gym_compose.engine.images import lean_images as images
from gym_compose.engine.images.image_settings import ImageSettings

pytestmark = pytest.mark.docker


def run_in(tag: str, *command: str) -> str:
    result = docker_cli.run_docker(["run", "--rm", tag, *command], timeout=120)
    return result.stdout


def write_image_setup(folder, module: str, expression: str, name: str) -> None:
    """An image_setup.py that writes `expression` (with `module` imported) to PREFIX/share/e2e/`name`."""
    (folder / "image_setup.py").write_text(
        f"import pathlib, sys, {module}\n"
        "share = pathlib.Path(sys.argv[1]) / 'share' / 'e2e'\n"
        "share.mkdir(parents=True)\n"
        f"(share / {name!r}).write_text({expression})\n")


@pytest.fixture(scope="module")
def offline_base() -> str:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GYM_COMPOSE_OFFLINE", "1")
        return images.ensure_base_image(progress=print)


@pytest.fixture
def removed_after(request):
    tags: list[str] = []
    yield tags
    for tag in tags:
        docker_cli.run_docker(["image", "rm", "--force", tag], timeout=120, check=False)


def test_offline_base_runs_the_runtime_as_the_non_root_user(offline_base):
    assert offline_base.startswith(f"{ImageSettings.from_env().image_prefix}/base:")
    output = run_in(
        offline_base,
        "python",
        "-c",
        "import os, sys, gym_compose.server, gym_compose.collect, fastapi, uvicorn, httpx, orjson, yaml;"
        "print(os.getuid(), os.getcwd(), sys.prefix, '%d.%d' % sys.version_info[:2], os.environ['PYTHONUNBUFFERED'])",
    )
    assert output.split() == ["10001", "/srv/server", "/opt/venv", "3.11", "1"]
    config = images.inspect_image(offline_base)["Config"]
    assert config["Cmd"] == ["python", "-m", "gym_compose.server"]


def test_offline_base_has_no_docs_or_perl_but_keeps_copyrights_and_certificates(offline_base):
    # mmdebstrap's doc filters (a dpkg.cfg.d file and a clean-up hook) and its merged-/usr hook (no
    # usrmerge, which pulls in perl; perl-base is essential and stays)
    output = run_in(
        offline_base,
        "sh",
        "-c",
        "find /usr/share/doc /usr/share/man /usr/share/info /usr/share/locale ! -type d ! -name copyright"
        " ! -name locale.alias | wc -l; ls /usr/share/doc/*/copyright | wc -l;"
        " { dpkg -s usrmerge || dpkg -s perl; } >/dev/null 2>&1 && echo perl || echo no-perl;"
        " test -s /etc/ssl/certs/ca-certificates.crt && echo certificates;"
        " test -d /bin && test -L /bin && echo merged-usr",
    )
    found, copyrights, perl, certificates, merged = output.split()
    assert found == "0" and int(copyrights) > 50
    assert (perl, certificates, merged) == ("no-perl", "certificates", "merged-usr")


def test_tiny_server_image_adds_only_its_files_and_is_not_rebuilt(offline_base, tmp_path, removed_after, monkeypatch):
    folder = tmp_path / "e2e_tiny_server"
    (folder / "data").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "app.py").write_text("ANSWER = 42\n")
    (folder / "data" / "rows.jsonl").write_text('{"q": 1}\n')
    (folder / "tests" / "test_app.py").write_text("def test(): pass\n")

    tag = images.ensure_server_image(folder, offline_base, progress=print)
    removed_after.append(tag)
    listing = run_in(tag, "sh", "-c", "cd /srv/server && find . -type f | sort && python -c 'import app; print(app.ANSWER)'")
    assert listing.split() == ["./app.py", "./data/rows.jsonl", "42"]
    assert images.image_size(tag) - images.image_size(offline_base) < 100_000

    monkeypatch.setenv("GYM_COMPOSE_OFFLINE", "1")
    lines: list[str] = []
    again = images.ensure_server_image(folder, images.ensure_base_image(progress=lines.append), progress=lines.append)
    assert again == tag
    assert not any(line.startswith("building") for line in lines), lines


def test_server_requirements_install_offline_from_the_host_wheelhouse(offline_base, tmp_path, removed_after):
    folder = tmp_path / "e2e_requirements_server"
    folder.mkdir()
    (folder / "app.py").write_text("import six\n")
    (folder / "requirements.txt").write_text("six==1.16.0\nfastapi\n")
    write_image_setup(folder, "six", "six.__version__", "made-with")  # runs last, the packages importable

    tag = images.ensure_server_image(folder, offline_base, progress=print)
    removed_after.append(tag)
    output = run_in(tag, "python", "-c", "import six, fastapi, app; print(six.__version__)")
    assert output.strip() == "1.16.0"
    assert run_in(tag, "cat", "/opt/venv/share/e2e/made-with") == "1.16.0"
    # fastapi is already in the base: nothing beyond six and the files is added
    assert images.image_size(tag) - images.image_size(offline_base) < 2_000_000
    # the install ran as root in the container that became the image: the base's user and command stay
    config, base_config = images.inspect_image(tag)["Config"], images.inspect_image(offline_base)["Config"]
    assert (config["User"], config["Cmd"], config["WorkingDir"]) == (
        base_config["User"], base_config["Cmd"], base_config["WorkingDir"])
    assert run_in(tag, "sh", "-c", "ls -A /tmp").strip() == ""  # the build folder left nothing


def test_a_package_compiled_from_its_sdist_offline_with_the_folders_build_hooks(offline_base, tmp_path, removed_after):
    """native-requirements.txt: mmh3's C extension compiled from its sdist in the Debian build
    stage, with native-build.env exported to native-prepare.sh (which marks the source's version),
    and image_setup.py run with the staged packages importable."""
    folder = tmp_path / "e2e_native_server"
    folder.mkdir()
    (folder / "app.py").write_text("import mmh3\n")
    (folder / "native-requirements.txt").write_text("mmh3==5.1.0\n")
    (folder / "native-build.env").write_text("# exported for the build\nE2E_LOCAL_VERSION=prepared\n")
    (folder / "native-prepare.sh").write_text(
        'set -e\ntest -n "$E2E_LOCAL_VERSION"\n'
        'sed -i "s/^version = \\"5.1.0\\"/version = \\"5.1.0+$E2E_LOCAL_VERSION\\"/" pyproject.toml\n')
    write_image_setup(folder, "mmh3", "str(mmh3.hash('foo'))", "hash")

    tag = images.ensure_server_image(folder, offline_base, progress=print)
    removed_after.append(tag)
    output = run_in(tag, "python", "-c", "import importlib.metadata as m, mmh3, app; print(mmh3.hash('foo'), m.version('mmh3'))")
    assert output.split() == ["-156908512", "5.1.0+prepared"]  # mmh3's documented hash of "foo"
    assert run_in(tag, "cat", "/opt/venv/share/e2e/hash") == "-156908512"
    assert images.inspect_image(tag)["Config"]["User"] == "10001:10001"
