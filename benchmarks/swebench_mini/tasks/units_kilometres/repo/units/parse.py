import re

_QUANTITY = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(mm|cm|m)\s*$")


def parse_quantity(text: str) -> tuple[float, str]:
    """`"5 m"` -> (5.0, "m")."""
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(f"not a length: {text!r}")
    return float(match.group(1)), match.group(2)
