"""The broker's errors: one root, `BrokerError`, each kind with the HTTP status the broker's
routes answer for it (app.py maps them at the border: `{"error": message}` with that status;
SandboxGone's answer also says why the sandbox is gone).

The sandbox client (gym_compose.sandbox.client) turns those answers back into NeMo Gym's sandbox
errors (sandbox/types.py) for the servers that lease.
"""

from __future__ import annotations

from gym_compose.sandbox.tokens import SERVER_HEADER


class BrokerError(Exception):
    status = 500


class Refused(BrokerError):
    status = 403


class UnknownSandbox(BrokerError):
    status = 404


class SandboxGone(BrokerError):
    status = 410


class Conflict(BrokerError):
    """The sandbox is in a state that cannot take the call (paused, being restored)."""

    status = 409


class Unsupported(BrokerError):
    """The platform cannot do this at all (snapshots and pause on Kubernetes)."""

    status = 501


class NoCapacity(BrokerError):
    status = 503


class StartFailed(BrokerError):
    status = 502


class Unauthorized(BrokerError):
    """A request without the project's token for the server it names."""

    status = 401

    def __init__(self) -> None:
        super().__init__("missing or wrong sandbox token (header Authorization: Bearer <token> and "
                         f"{SERVER_HEADER}: <instance>)")


class BackendError(BrokerError):
    """The platform (the Docker Engine, the Kubernetes API) refused or failed a call; the message
    is the platform's."""

    status = 502


class NotFound(BackendError):
    pass
