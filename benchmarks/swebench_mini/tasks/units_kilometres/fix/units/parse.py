import re

from units.table import METRES

_QUANTITY = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([a-z]+)\s*$")


def parse_quantity(text: str) -> tuple[float, str]:
    """`"5 m"` -> (5.0, "m"); the unit must be one of the table's."""
    match = _QUANTITY.match(text)
    if not match or match.group(2) not in METRES:
        raise ValueError(f"not a length: {text!r}")
    return float(match.group(1)), match.group(2)
