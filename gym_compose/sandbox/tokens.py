"""Who may call the broker: each server gets its own token, derived from the project's secret.

The broker holds the project secret (compose secret `sandbox_broker_token`); a server that declared
sandboxes holds only `HMAC(secret, its instance name)` (compose secret `sandbox_token.<instance>`),
so it can act only as itself and never on another server's sandboxes. Sandboxes hold neither.

A lease also carries a grant, `HMAC(secret, "grant:" + sandbox id)`: the owner may hand it (with the
sandbox id, in `serialize()`'s descriptor) to another server of the project, which can then run
commands and move files in that one sandbox (NeMo Gym's `AsyncSandbox.connect`), but not release it.
"""

from __future__ import annotations

import hashlib
import hmac

from gym_compose.contract import SANDBOX_BROKER_SECRET as BROKER_SECRET

__all__ = ["BROKER_SECRET"]  # and below
SERVER_HEADER = "x-gym-sandbox-server"
GRANT_HEADER = "x-gym-sandbox-grant"


def server_secret_name(instance: str) -> str:
    return f"sandbox_token.{instance}"


def server_token(project_secret: str, instance: str) -> str:
    return hmac.new(project_secret.encode(), instance.encode(), hashlib.sha256).hexdigest()


def token_matches(project_secret: str, instance: str, presented: str) -> bool:
    return hmac.compare_digest(server_token(project_secret, instance), presented)


def sandbox_grant(project_secret: str, sandbox_id: str) -> str:
    return hmac.new(project_secret.encode(), f"grant:{sandbox_id}".encode(), hashlib.sha256).hexdigest()


def grant_matches(project_secret: str, sandbox_id: str, presented: str) -> bool:
    return hmac.compare_digest(sandbox_grant(project_secret, sandbox_id), presented)
