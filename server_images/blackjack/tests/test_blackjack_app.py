"""blackjack: the app imports under the gym-compose runtime and its pure logic holds."""

import importlib.util
import sys
from pathlib import Path

from gym_compose.server import compat

HERE = Path(__file__).resolve().parents[1]


def load_app():
    compat.install()
    sys.path.insert(0, str(HERE))
    spec = importlib.util.spec_from_file_location("blackjack_app", HERE / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_points_count_aces_soft():
    app = load_app()
    assert app.points(["A", "K"]) == 21
    assert app.points(["A", "A", "9"]) == 21
    assert app.points(["K", "Q", "5"]) == 25
