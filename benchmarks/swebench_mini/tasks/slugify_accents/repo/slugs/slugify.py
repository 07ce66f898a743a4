import re


def slugify(title: str, separator: str = "-") -> str:
    """A lower-case ASCII slug of `title`: words joined by `separator`."""
    words = re.findall(r"[a-z0-9]+", title.lower())
    return separator.join(words)
