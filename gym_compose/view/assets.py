"""The page's files: its own (static/) and the two libraries it uses, read from installed packages.

- DataTables (with its jQuery) from the `itables` package, `itables/html/dt_bundle.{js,css}`: the
  task table's sorting, searching and server-side paging.
- plotly.js from the `plotly` package, `plotly/package_data/plotly.min.js`: the reward histogram
  and the pass@k curves.
Both are MIT-licensed and shipped as built files inside their wheels, so nothing is downloaded or
built at install time, and nothing is copied into this repository. See docs/view.md.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from gym_compose.errors import UserError

STATIC_DIR = Path(__file__).with_name("static")


@dataclass(frozen=True)
class Asset:
    name: str  # the URL name under /assets/
    package: str  # the installed package that ships it ("" for our own static files)
    relative_path: str
    media_type: str
    licence: str = ""


LIBRARIES = {
    "datatables.js": Asset("datatables.js", "itables", "html/dt_bundle.js", "text/javascript",
                           "DataTables (MIT) and jQuery (MIT), bundled by itables (MIT)"),
    "datatables.css": Asset("datatables.css", "itables", "html/dt_bundle.css", "text/css",
                            "DataTables (MIT), bundled by itables (MIT)"),
    "plotly.js": Asset("plotly.js", "plotly", "package_data/plotly.min.js", "text/javascript", "plotly.js (MIT)"),
}
OWN = {
    "viewer.js": Asset("viewer.js", "", "viewer.js", "text/javascript"),
    "viewer.css": Asset("viewer.css", "", "viewer.css", "text/css"),
}


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)  # finds the folder without importing the package
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            f"gym-compose view needs the Python package {package!r}, which is not installed",
            hint="run scripts/setup (or: pip install -e .) to install gym-compose's dependencies",
        )
    return Path(next(iter(spec.submodule_search_locations)))


def asset_path(name: str) -> Path:
    if name in OWN:
        return STATIC_DIR / OWN[name].relative_path
    asset = LIBRARIES.get(name)
    if asset is None:
        raise LookupError(f"no asset {name!r}")
    path = _package_dir(asset.package) / asset.relative_path
    if not path.is_file():
        raise UserError(
            f"the {asset.package} package has no {asset.relative_path}; its layout changed",
            hint=f"install the {asset.package} version pyproject.toml names (scripts/setup)",
        )
    return path


def media_type(name: str) -> str:
    return (OWN.get(name) or LIBRARIES[name]).media_type


def read_text(name: str) -> str:
    return asset_path(name).read_text(encoding="utf-8")


def page_template() -> str:
    return (STATIC_DIR / "viewer.html").read_text(encoding="utf-8")
