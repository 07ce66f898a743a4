"""example_single_tool_call: the app imports under the gym-compose runtime and its pure logic holds."""

from pathlib import Path

from gym_compose.server.testing import load_app as load_server_app

HERE = Path(__file__).resolve().parents[1]


def load_app():
    return load_server_app(HERE)


def test_get_weather_names_the_city():
    import asyncio

    app = load_app()
    server = app.WeatherResourcesServer(config=app.WeatherServerConfig(name="weather"))
    report = asyncio.run(server.get_weather(app.WeatherQuery(city="Oslo")))
    assert report.city == "Oslo" and "Oslo" in report.weather_description
