from units.parse import parse_quantity
from units.table import METRES


def convert(text: str, unit: str) -> float:
    """The length `text` (e.g. "12 cm") in `unit`."""
    value, source = parse_quantity(text)
    if unit not in METRES:
        raise ValueError(f"unknown unit {unit!r}")
    return value * METRES[source] / METRES[unit]
