import re
import unicodedata


def slugify(title: str, separator: str = "-") -> str:
    """A lower-case ASCII slug of `title`: words joined by `separator`; accented letters lose
    their accents."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    words = re.findall(r"[a-z0-9]+", ascii_title.lower())
    return separator.join(words)
