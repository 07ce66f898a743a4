"""Helpers the tests share: fakes, stack builders, CLI runners. Test modules import from here
(and get their shared fixtures from the conftest.py files), never from one another."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
