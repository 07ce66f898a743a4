"""calculator_gymnasium: the app imports under the gym-compose runtime and its pure logic holds."""

from pathlib import Path

from gym_compose.server.testing import load_app as load_server_app

HERE = Path(__file__).resolve().parents[1]


def load_app():
    return load_server_app(HERE)


def test_server_class_is_a_gymnasium_server():
    app = load_app()
    from gym_compose.server.gymnasium import GymnasiumServer

    assert issubclass(app.CalculatorEnv, GymnasiumServer)
    assert app.evaluate("100 / 8") == 12.5


def test_huge_powers_are_refused_at_once_not_computed():
    app = load_app()
    assert app.evaluate("3 ** 4") == 81
    try:
        app.evaluate("9 ** 9 ** 9")
    except ValueError as error:
        assert "too large" in str(error)
    else:
        raise AssertionError("9 ** 9 ** 9 must be refused")
