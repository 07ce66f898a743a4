from typer.testing import CliRunner

from gym_compose.cli import app

runner = CliRunner()


def test_help_lists_the_whole_command_tree():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ["resolve", "render", "build", "up", "down", "ps", "logs", "list", "eval"]:
        assert command in result.output


def test_an_install_without_its_checkout_fails_at_once_saying_how_to_install(tmp_path):
    """`pip install .` (not editable) puts the package into site-packages without server_images/ & co."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    site = tmp_path / "site-packages"
    shutil.copytree(repo / "gym_compose", site / "gym_compose", ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run([sys.executable, "-m", "gym_compose", "list"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2, result.stderr
    assert "runs from its source checkout" in result.stderr and "pip install -e" in result.stderr
    assert "Traceback" not in result.stderr
