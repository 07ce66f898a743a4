"""stateful_counter: the app imports under the gym-compose runtime and its pure logic holds."""

from pathlib import Path

from gym_compose.server.testing import load_app as load_server_app

HERE = Path(__file__).resolve().parents[1]


def load_app():
    return load_server_app(HERE)


def test_counter_server_keeps_state_in_a_reapable_session_state():
    app = load_app()
    from gym_compose.server.sessions import SessionState

    server = app.CounterServer(config={"name": "counter"})
    assert isinstance(server.session_state, SessionState)
