"""calculator: the app imports under the gym-compose runtime and its pure logic holds."""

from pathlib import Path

from gym_compose.server.testing import load_app as load_server_app

HERE = Path(__file__).resolve().parents[1]


def load_app():
    return load_server_app(HERE)


def test_evaluate_and_final_number():
    app = load_app()
    assert app.evaluate("(3 + 5) ** 2") == 64
    assert app.final_number("so the answer is -25.") == -25.0
    try:
        app.evaluate("__import__('os')")
    except ValueError:
        pass
    else:
        raise AssertionError("non-arithmetic must be refused")


def test_huge_powers_are_refused_at_once_not_computed():
    app = load_app()
    assert app.evaluate("2 ** 64") == 18446744073709551616 and app.evaluate("2 ** -2") == 0.25
    for expression in ("9 ** 9 ** 9", "(9 ** 999) ** 999", "-10 ** 100000"):
        try:
            app.evaluate(expression)
        except ValueError as error:
            assert "too large" in str(error)
        else:
            raise AssertionError(f"{expression} must be refused")
