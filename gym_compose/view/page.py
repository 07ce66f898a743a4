"""The page's HTML: one template (static/viewer.html), filled for the server or for an export.

The live page links its assets. The exported page carries everything: CSS inline, the run data as
JSON, the libraries as text in hidden <textarea>s (RCDATA: only `&` and `<` need escaping, and
no library text can end the element early), which viewer.js turns into scripts with Blob URLs.
"""

from __future__ import annotations

import html
from typing import Any

import orjson

from gym_compose.view import assets

STYLES, DATA, SCRIPTS = "<!-- gym:styles -->", "<!-- gym:data -->", "<!-- gym:scripts -->"


def json_script(data: Any) -> str:
    text = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS).decode()
    # `</` and `<!--` occur only inside JSON strings, where `<\/` and `<\u0021--` mean the same
    text = text.replace("</", "<\\/").replace("<!--", "<\\u0021--")
    return f'<script id="gym-data" type="application/json">{text}</script>'


def _fill(styles: str, data: Any, scripts: str) -> str:
    template = assets.page_template()
    return template.replace(STYLES, styles).replace(DATA, json_script(data)).replace(SCRIPTS, scripts)


def live_page() -> str:
    styles = '<link rel="stylesheet" href="assets/datatables.css">\n<link rel="stylesheet" href="assets/viewer.css">'
    return _fill(styles, {"mode": "live"}, '<script src="assets/viewer.js"></script>')


def _inline_script(source: str) -> str:
    lowered = source.lower()
    if "</script" in lowered or "<!--" in lowered:
        raise ValueError("viewer.js must not contain '</script' or '<!--' (it is inlined into exports)")
    return f"<script>\n{source}\n</script>"


def export_page(data: dict[str, Any]) -> str:
    """A page that needs no server and no network: every byte it uses is in it."""
    css = assets.read_text("datatables.css") + "\n" + assets.read_text("viewer.css")
    styles = "<style>\n" + css.replace("</style", "<\\/style") + "\n</style>"
    libraries = "\n".join(
        f'<textarea hidden class="gym-asset" data-name="{name}" '
        f'data-licence="{html.escape(assets.LIBRARIES[name].licence)}">'
        f"{html.escape(assets.read_text(name), quote=False)}</textarea>"
        for name in ("datatables.js", "plotly.js")
    )
    scripts = libraries + "\n" + _inline_script(assets.read_text("viewer.js"))
    return _fill(styles, data, scripts)
