"""A server's wheelhouse can meet the runtime's pins from the runtime's own wheelhouse."""

from __future__ import annotations

import subprocess

from gym_compose.engine.images import wheelhouse


def test_find_links_folders_reach_pip_and_a_constraint_is_met_from_them(monkeypatch, tmp_path):
    runtime = tmp_path / "runtime-wheels"
    runtime.mkdir()
    (runtime / "antlr4_python3_runtime-4.9.3-py3-none-any.whl").write_bytes(b"")  # built here from its sdist
    commands: list[list[str]] = []

    def pip(command):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(wheelhouse, "_run_pip", pip)
    folder = wheelhouse.ensure_wheelhouse("math-verify==0.8.0\n", tmp_path / "cache", lambda line: None,
                                          constraints=wheelhouse.pinned_versions(runtime), find_links=(runtime,))
    (command,) = commands
    pairs = list(zip(command, command[1:], strict=False))
    assert ("--find-links", str(runtime)) in pairs
    assert (folder / ".complete").exists()
    assert wheelhouse.pinned_versions(runtime) == "antlr4_python3_runtime==4.9.3\n"
