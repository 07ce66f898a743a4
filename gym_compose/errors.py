"""Errors that reach the user as one clear message, never as a traceback."""


class UserError(Exception):
    """Something the user can fix: bad input, a missing file, an unhealthy service.

    `str(error)` is the whole message the CLI prints; `hint`, when given, says how to fix it.
    """

    def __init__(self, message: str, hint: str | None = None, exit_code: int = 2):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"

