"""The mock model's call gate from outside the stack: how an e2e test lands a fault mid-run.

A stack started with `gated(N)` answers N model calls, then holds every further one
(gym_compose/server/models/mock_gate.py). A run that needs more calls than the gate lets through
cannot finish while it holds, so a fault injected once `calls_held` is true lands mid-run
whatever the machine's speed. `open_gate` lets N more through (None: all from then on).
"""

from __future__ import annotations

import json
import subprocess

MODEL_SERVICE = "policy-model"
_CLIENT = (
    "import sys, urllib.request as u\n"
    "data = sys.argv[1].encode() if len(sys.argv) > 1 else None\n"
    "request = u.Request('http://127.0.0.1:8000/mock/gate', data=data, headers={'content-type': 'application/json'})\n"
    "print(u.urlopen(request, timeout=30).read().decode())\n"
)


def gated(passes: int) -> str:
    """The override that gives the built-in mock model (policy_model) a gate."""
    return f"++policy_model.responses_api_models.mock_model.hold_after_calls={passes}"


def _gate(project: str, *body: str) -> dict | None:
    done = subprocess.run(["docker", "exec", f"{project}-{MODEL_SERVICE}-1", "python", "-I", "-c", _CLIENT, *body],
                          capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout) if done.returncode == 0 else None


def calls_held(project: str) -> bool:
    """Whether the model holds calls now (False too while its container is not up yet)."""
    state = _gate(project)
    return bool(state and state["held"])


def open_gate(project: str, passes: int | None) -> None:
    """Release the held calls and let `passes` more through (None: every call from now on)."""
    state = _gate(project, json.dumps({"passes": passes}))
    assert state is not None and state["passes_left"] == passes, state
