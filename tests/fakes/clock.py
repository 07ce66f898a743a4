"""A clock the engine's waits can be given (gym_compose.engine.clock.Clock): sleeping moves it."""


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
