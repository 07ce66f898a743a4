"""Example resources server: one `get_weather` tool; the reward is 1.0 when the model called it.

Written in NeMo Gym's style, so it runs under NeMo Gym itself as well as under gym-compose
(whose runtime provides the `nemo_gym` names when NeMo Gym is not installed).
"""

from fastapi import FastAPI
from pydantic import BaseModel

from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)


class WeatherServerConfig(BaseResourcesServerConfig):
    pass


class WeatherQuery(BaseModel):
    city: str


class WeatherReport(BaseModel):
    city: str
    weather_description: str


class WeatherResourcesServer(SimpleResourcesServer):
    config: WeatherServerConfig

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/get_weather")(self.get_weather)
        return app

    async def get_weather(self, body: WeatherQuery) -> WeatherReport:
        return WeatherReport(city=body.city, weather_description=f"It is cold in {body.city}.")

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        called_tool = any(
            item.type == "function_call" and item.name == "get_weather" for item in body.response.output
        )
        return BaseVerifyResponse(**body.model_dump(), reward=float(called_tool))


if __name__ == "__main__":
    WeatherResourcesServer.run_webserver()
