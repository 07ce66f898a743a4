from typer.testing import CliRunner

from gym_compose.cli import app

runner = CliRunner()


def test_help_lists_the_whole_command_tree():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ["resolve", "render", "build", "up", "down", "ps", "logs", "list", "eval"]:
        assert command in result.output
