"""The sandbox broker's service name and port: what the host's run supervision needs without
importing the sandbox plan (its policy models are pydantic's, ~0.1 s to import)."""

BROKER_SERVICE = "sandbox-broker"
BROKER_PORT = 8000
