"""The image budget: task images the broker pulled, least recently used first, and which to remove.

Only images this broker pulled count (those already on the engine, the plan's built images and
snapshots never do). An image is removed only once no sandbox uses it or is starting from it; a
lease that asks for it later pulls it again. docs/swe.md, "The image budget".
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Optional


class ImageCache:
    def __init__(self, budget_bytes: Optional[int]):
        self.budget_bytes = budget_bytes
        self._sizes: OrderedDict[str, int] = OrderedDict()  # least recently used first
        self.evicted: list[dict[str, object]] = []

    @property
    def total_bytes(self) -> int:
        return sum(self._sizes.values())

    def __contains__(self, image: object) -> bool:
        return image in self._sizes

    def pulled(self, image: str, size_bytes: int) -> None:
        self._sizes[image] = size_bytes
        self._sizes.move_to_end(image)

    def used(self, image: str) -> None:
        if image in self._sizes:
            self._sizes.move_to_end(image)

    def over_budget(self, in_use: Iterable[str]) -> list[str]:
        """The images to remove, oldest use first, until the rest fit the budget (those in use stay)."""
        if self.budget_bytes is None:
            return []
        busy = set(in_use)
        excess = self.total_bytes - self.budget_bytes
        victims = []
        for image, size in self._sizes.items():
            if excess <= 0:
                break
            if image not in busy:
                victims.append(image)
                excess -= size
        return victims

    def removed(self, image: str, seconds: float) -> None:
        size = self._sizes.pop(image, 0)
        self.evicted.append({"image": image, "bytes": size, "seconds": round(seconds, 2)})
