"""The mmdebstrap command of the offline root filesystems: its hooks run on a fake tree."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

from gym_compose.engine.images import debian_base
from gym_compose.engine.images.image_settings import ImageSettings


def _settings(tmp_path: Path, mirror: str | None = None) -> ImageSettings:
    return dataclasses.replace(ImageSettings.from_env(), cache_dir=tmp_path / "cache", debian_mirror=mirror)


def _hook(command: list[str], option: str) -> str:
    (value,) = [arg.split("=", 1)[1] for arg in command if arg.startswith(f"--{option}=")]
    return value


def test_dpkg_skips_fsyncs_and_no_recommends(tmp_path):
    command = debian_base.mmdebstrap_command(_settings(tmp_path), tmp_path / "rootfs.tar")
    assert "--dpkgopt=force-unsafe-io" in command
    assert '--aptopt=APT::Install-Recommends "false"' in command
    # path filters given to mmdebstrap itself would send every essential package through its tar filter
    assert not [arg for arg in command if arg.startswith("--dpkgopt=path-")]
    assert command[-2:] == ["bookworm", str(tmp_path / "rootfs.tar")]


def test_setup_hook_writes_the_dpkg_path_filters(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    hook = _hook(debian_base.mmdebstrap_command(_settings(tmp_path), tmp_path / "out.tar"), "setup-hook")
    subprocess.run(["sh", "-c", hook, "exec", str(root)], check=True)
    written = (root / "etc/dpkg/dpkg.cfg.d/90gym-compose-excludes").read_text().splitlines()
    assert written == list(debian_base._EXCLUDED_PATHS)


def test_customize_hook_removes_docs_but_keeps_copyrights(tmp_path):
    root = tmp_path / "root"
    share = root / "usr/share"
    for relative in ("doc/bash/copyright", "doc/bash/changelog.gz", "doc/bash/examples/x.sh", "man/man1/ls.1.gz",
                     "info/dir", "locale/de/LC_MESSAGES/x.mo", "locale/locale.alias", "python3/keep.py"):
        (share / relative).parent.mkdir(parents=True, exist_ok=True)
        (share / relative).write_text("x")
    (share / "doc/libgcc-s1").symlink_to("gcc-12-base")
    hook = _hook(debian_base.mmdebstrap_command(_settings(tmp_path), tmp_path / "out.tar"), "customize-hook")
    subprocess.run(["sh", "-c", hook, "exec", str(root)], check=True)
    left = sorted(str(path.relative_to(share)) for path in share.rglob("*") if not path.is_dir())
    assert left == ["doc/bash/copyright", "locale/locale.alias", "python3/keep.py"]
    assert (share / "man").is_dir() and not list((share / "man").iterdir())


def test_rootfs_key_follows_what_makes_the_rootfs(tmp_path):
    settings = _settings(tmp_path)
    key = debian_base.rootfs_key(settings)
    assert key == debian_base.rootfs_key(_settings(tmp_path))
    assert key != debian_base.rootfs_key(settings, debian_base.BUILD_PACKAGES)
    assert key != debian_base.rootfs_key(settings, suite="trixie")
    assert key != debian_base.rootfs_key(_settings(tmp_path, "http://mirror.example/debian"))


def test_rootfs_key_names_the_merged_usr_hook_not_where_mmdebstrap_lives(tmp_path, monkeypatch):
    settings = _settings(tmp_path)
    monkeypatch.setattr(debian_base, "_merged_usr_hooks", lambda: Path("/usr/share/mmdebstrap/hooks/maybe-merged-usr"))
    key = debian_base.rootfs_key(settings)
    monkeypatch.setattr(debian_base, "_merged_usr_hooks", lambda: Path("/opt/mm/hooks/maybe-merged-usr"))
    assert debian_base.rootfs_key(settings) == key
    monkeypatch.setattr(debian_base, "_merged_usr_hooks", lambda: None)  # an mmdebstrap without the hook: usrmerge
    assert debian_base.rootfs_key(settings) != key


def test_without_mmdebstrap_the_key_is_that_of_a_debian_install(tmp_path, monkeypatch):
    settings = _settings(tmp_path)
    installed = debian_base.rootfs_key(settings)
    monkeypatch.setattr(debian_base.shutil, "which", lambda name: None)
    assert debian_base.rootfs_key(settings) == installed
