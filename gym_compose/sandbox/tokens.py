"""Who may call the broker: each server gets its own token, derived from the project's secret.

The broker holds the project secret (compose secret `sandbox_broker_token`); a server that declared
sandboxes holds only `HMAC(secret, its instance name)` (compose secret `sandbox_token.<instance>`),
so it can act only as itself and never on another server's sandboxes. Sandboxes hold neither.
"""

from __future__ import annotations

import hashlib
import hmac

BROKER_SECRET = "sandbox_broker_token"
SERVER_HEADER = "x-gym-sandbox-server"


def server_secret_name(instance: str) -> str:
    return f"sandbox_token.{instance}"


def server_token(project_secret: str, instance: str) -> str:
    return hmac.new(project_secret.encode(), instance.encode(), hashlib.sha256).hexdigest()


def token_matches(project_secret: str, instance: str, presented: str) -> bool:
    return hmac.compare_digest(server_token(project_secret, instance), presented)
