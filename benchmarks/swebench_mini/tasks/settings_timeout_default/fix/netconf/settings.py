"""`key = value` settings with defaults; `#` starts a comment."""

DEFAULTS = {"timeout": 30, "retries": 3, "verbose": False}


def _value(text: str):
    lowered = text.lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    try:
        return int(text)
    except ValueError:
        return text


def parse_settings(text: str) -> dict:
    settings = dict(DEFAULTS)
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"line {number}: expected key = value")
        settings[key.strip()] = _value(value.strip())
    return settings
