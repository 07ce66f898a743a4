"""Every e2e module that runs NeMo Gym's own code carries the bound for building its runtime image.

Whichever such test comes first in a run builds the shared image (over 600 s on a fresh CI machine),
and which one that is depends on file order and selection: CI failed twice on a module without it."""

from __future__ import annotations

import re
from pathlib import Path

E2E = Path(__file__).resolve().parents[1] / "e2e"
RUNS_NEMO_GYM = re.compile(r"nemo_gym_checkout|runtime[:=] ?nemo_gym")


def test_modules_that_run_nemo_gyms_code_carry_the_runtime_build_bound():
    users = [path for path in sorted(E2E.glob("test_*.py")) if RUNS_NEMO_GYM.search(path.read_text())]
    assert len(users) >= 5  # the pattern still finds them
    unbounded = [path.name for path in users if "BUILDS_NEMO_GYM_RUNTIME]" not in path.read_text()]
    assert unbounded == []
