"""blackjack: the app imports under the gym-compose runtime and its pure logic holds."""

from pathlib import Path

from gym_compose.server.testing import load_app as load_server_app

HERE = Path(__file__).resolve().parents[1]


def load_app():
    return load_server_app(HERE)


def test_points_count_aces_soft():
    app = load_app()
    assert app.points(["A", "K"]) == 21
    assert app.points(["A", "A", "9"]) == 21
    assert app.points(["K", "Q", "5"]) == 25
