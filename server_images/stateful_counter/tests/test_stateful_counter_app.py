"""stateful_counter: the app imports under the gym-compose runtime and its pure logic holds."""

import importlib.util
import sys
from pathlib import Path

from gym_compose.server import compat

HERE = Path(__file__).resolve().parents[1]


def load_app():
    compat.install()
    sys.path.insert(0, str(HERE))
    spec = importlib.util.spec_from_file_location("stateful_counter_app", HERE / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_counter_server_keeps_state_in_a_reapable_session_state():
    app = load_app()
    from gym_compose.server.sessions import SessionState

    server = app.CounterServer(config={"name": "counter"})
    assert isinstance(server.session_state, SessionState)
