"""Errors that reach the user as one clear message and an exit code, never as a traceback.

One root, `GymComposeError`; below it the usage errors (`UserError`: what the user asked for is
wrong, exit 2) apart from the failures of what the command needs from the machine
(`EnvironmentFailure`): the Docker engine (`EngineFailure`, exit 3) and the stack it runs
(`StackFailure`, exit 4). docs/cli.md lists the exit codes.
"""

EXIT_USAGE = 2
EXIT_ENGINE = 3
EXIT_STACK = 4


class GymComposeError(Exception):
    """`str(error)` is the whole message the CLI prints; `hint`, when given, says how to fix it;
    the CLI exits with `exit_code`."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UserError(GymComposeError):
    """Something the user can fix in what they asked for: a bad flag, config, override, row or
    file, a name that is taken."""

    exit_code = EXIT_USAGE


class EnvironmentFailure(GymComposeError):
    """What the command needs from this machine failed, not what the user asked for: fix the
    machine (or wait) and run the same command again."""


class EngineFailure(EnvironmentFailure):
    """The Docker engine: not running, refusing us, no `docker` CLI, a call that timed out, a
    command it failed."""

    exit_code = EXIT_ENGINE


class StackFailure(EnvironmentFailure):
    """The stack: a server that did not become healthy, or died while it started."""

    exit_code = EXIT_STACK
