"""example_single_tool_call: the app imports under the gym-compose runtime and its pure logic holds."""

import importlib.util
import sys
from pathlib import Path

from gym_compose.server import compat

HERE = Path(__file__).resolve().parents[1]


def load_app():
    compat.install()
    sys.path.insert(0, str(HERE))
    spec = importlib.util.spec_from_file_location("example_single_tool_call_app", HERE / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_get_weather_names_the_city():
    import asyncio

    app = load_app()
    server = app.WeatherResourcesServer(config=app.WeatherServerConfig(name="weather"))
    report = asyncio.run(server.get_weather(app.WeatherQuery(city="Oslo")))
    assert report.city == "Oslo" and "Oslo" in report.weather_description
