"""The packages a server folder asks for, read the way NeMo Gym reads them.

NeMo Gym 0.7 installs a server's venv from its `requirements.txt` or, failing that, from the
`[project] dependencies` of its `pyproject.toml` (a folder with both is an error there), each where
its `[tool.uv.sources]` entry says (uv installs those folders). Lines
naming nemo-gym itself (`-e nemo-gym[dev] @ ../../`, `nemo-gym[dev]`) and any line pointing at the
checkout root (`../..`, which NeMo Gym drops outside a checkout) are left out: the runtime image
holds NeMo Gym (or the compatibility layer stands in for it). Also the folder's
`native-requirements.txt` (packages compiled in the image build: engine/images/native_build.py).
Pure reads of files: the plan's runtime choice and the image builds both ask them.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from gym_compose.errors import UserError

_NEMO_GYM_REQUIREMENT = re.compile(r"^\s*(-e\s+)?nemo[-_]gym\b", re.IGNORECASE)
NATIVE_REQUIREMENTS = "native-requirements.txt"


def server_requirements(implementation_dir: Path) -> str:
    """The installable lines ('' when there are none)."""
    requirements = implementation_dir / "requirements.txt"
    pyproject = implementation_dir / "pyproject.toml"
    if requirements.is_file():
        lines = [line.strip() for line in requirements.read_text().splitlines()]
    elif pyproject.is_file():
        lines = _pyproject_dependencies(pyproject)
    else:
        return ""
    kept = [line for line in lines if line and not line.startswith("#") and _installable(line)]
    return "\n".join(kept) + "\n" if kept else ""


def with_extra_requirements(requirements: str, extra: tuple[str, ...]) -> str:
    """The folder's requirement lines plus each extra one (the plan's: `mcp` for a server serving
    /mcp) whose package they do not name already: the folder's own pin wins."""
    named = {_requirement_name(line) for line in requirements.splitlines() if line.strip()}
    added = [line for line in extra if _requirement_name(line) not in named]
    return requirements + "".join(f"{line}\n" for line in added)


def _requirement_name(line: str) -> str:
    return canonical_name(re.split(r"[\s<>=!~;\[@]", line.strip(), maxsplit=1)[0])


def _installable(line: str) -> bool:
    return not _NEMO_GYM_REQUIREMENT.match(line) and "../.." not in line


def _pyproject_dependencies(path: Path) -> list[str]:
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{path} is not valid TOML: {error}",
                        hint="fix the file, or list the server's packages in requirements.txt") from None
    dependencies = (data.get("project") or {}).get("dependencies") or []
    if not isinstance(dependencies, list) or not all(isinstance(item, str) for item in dependencies):
        raise UserError(f"{path}: [project] dependencies must be a list of requirement strings")
    sources = ((data.get("tool") or {}).get("uv") or {}).get("sources") or {}
    if not isinstance(sources, dict):
        raise UserError(f"{path}: [tool.uv.sources] must be a table of package = {{ source }}")
    by_name = {canonical_name(str(name)): source for name, source in sources.items()}
    return [_from_uv_source(item.strip(), by_name, path) for item in dependencies]


def _from_uv_source(line: str, sources: dict[str, Any], path: Path) -> str:
    """A dependency where uv would take it from: a package its `[tool.uv.sources]` fetches from git
    or a URL becomes a direct reference to that, never the release of the same name on the package
    index, which may be another project's (code_fim's human-eval-infilling comes from git; PyPI's
    human-eval-infilling 2.15.0 is an empty package of someone else's)."""
    if not sources or not _installable(line):
        return line
    from packaging.requirements import InvalidRequirement, Requirement  # only here: most folders have no sources

    try:
        requirement = Requirement(line)
    except InvalidRequirement as error:
        raise UserError(f"{path}: [project] dependencies: {line!r} is not a valid requirement: {error}") from None
    name = canonical_name(requirement.name)
    if name not in sources:
        return line
    where = f"{path}: [tool.uv.sources] {requirement.name}"
    url = _source_url(sources[name], where)
    extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
    marker = f" ; {requirement.marker}" if requirement.marker else ""
    return f"{requirement.name}{extras} @ {url}{marker}"


def _source_url(source: Any, where: str) -> str:
    """The pip direct-reference URL of one uv source table (git or url)."""
    if not isinstance(source, dict):
        raise UserError(f"{where} lists several sources (one per platform or marker); gym-compose takes one",
                        hint="give the package one git or url source, or a `name @ URL` line in requirements.txt")
    subdirectory = f"#subdirectory={source['subdirectory']}" if source.get("subdirectory") else ""
    if "git" in source:
        reference = source.get("rev") or source.get("tag") or source.get("branch")
        return f"git+{source['git']}" + (f"@{reference}" if reference else "") + subdirectory
    if "url" in source:
        return f"{source['url']}{subdirectory}"
    kind = next(iter(source), "an empty table")
    raise UserError(f"{where} is a {kind!r} source, which the image build cannot follow "
                    "(it installs a server's packages from the package index, git or a URL)",
                    hint="replace it with a git or url source, or list the package as `name @ URL` in requirements.txt")


def shadowing_pins(own_pins: str, runtime_pins: str) -> dict[str, tuple[str, str]]:
    """The packages of a server's resolved set (`name==version` lines) that the runtime holds at
    another version: canonical name -> (the server's pin, the runtime's version). They go into the
    server image's own site directory, ahead of the runtime's on the path (the shadow layer,
    docs/nemo-gym-runtime.md); every other package stays the runtime's."""
    runtime = dict(_pins(runtime_pins))
    shadow: dict[str, tuple[str, str]] = {}
    for name, version in _pins(own_pins):
        if name in runtime and runtime[name] != version:
            shadow[name] = (f"{name}=={version}", runtime[name])
    return shadow


def _pins(text: str) -> list[tuple[str, str]]:
    pairs = []
    for line in text.splitlines():
        name, separator, version = line.strip().partition("==")
        if separator and name and not name.startswith("#"):
            pairs.append((canonical_name(name), version.strip()))
    return pairs


def native_requirements(implementation_dir: Path) -> str:
    """The requirement lines of native-requirements.txt ('' when the folder has none)."""
    path = implementation_dir / NATIVE_REQUIREMENTS
    if not path.is_file():
        return ""
    lines = [line.strip() for line in path.read_text().splitlines()]
    kept = [line for line in lines if line and not line.startswith("#")]
    return "\n".join(kept) + "\n" if kept else ""


def canonical_name(name: str) -> str:
    """A distribution's name as PEP 503 compares them (`Pillow`, `pillow` and `PIL_low` alike)."""
    return re.sub(r"[-_.]+", "-", name).lower()
