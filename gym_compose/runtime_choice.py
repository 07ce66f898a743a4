"""Which runtime runs a server: the lean gym-compose runtime or the real NeMo Gym package.

Pure and host-side: it reads a server's Python files (with `ast`, never importing them) and
compares their `nemo_gym` imports with what the compatibility layer (gym_compose.server.compat)
provides. Built-ins and servers whose imports the layer fully covers run on the lean runtime
(the base image); the others on the NeMo Gym runtime (nemo-gym 0.7 with its dependencies in one
shared image). A server's `docker.runtime` config key (`lean`, `nemo_gym`, `auto`) overrides the
choice. docs/nemo-gym-runtime.md describes both.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

LEAN = "lean"
NEMO_GYM = "nemo_gym"
AUTO = "auto"
RUNTIMES = (LEAN, NEMO_GYM)
# Top-level folders of a NeMo Gym checkout whose servers import one another as packages.
SERVER_PACKAGES = ("resources_servers", "responses_api_agents", "responses_api_models", "environment_servers")
_SKIPPED_DIRS = {"tests", "test", ".venv", "venv", "__pycache__", "node_modules", ".git", "data"}
_MAX_FILES = 400


@dataclass(frozen=True)
class RuntimeChoice:
    runtime: str  # LEAN | NEMO_GYM
    reason: str
    # other servers of the same search root this one imports (server_type/name), transitively
    siblings: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Import:
    module: str
    names: tuple[str, ...]  # `from module import names`; () for `import module`
    where: str  # file:line


@lru_cache(maxsize=1)
def compat_names() -> dict[str, frozenset[str]]:
    """NeMo Gym module path -> the names the compatibility layer gives it."""
    from gym_compose.server.compat.names import MODULES

    return {module: frozenset(attributes()) for module, attributes in MODULES.items()}


def choose_runtime(implementation_dir: Path | None, requested: str | None = None,
                   server_type: str | None = None) -> RuntimeChoice:
    """The runtime for one server; `implementation_dir` None is a built-in (plan.source_dir_of)."""
    if implementation_dir is None:
        return RuntimeChoice(LEAN, "built-in implementation")
    root = search_root_of(implementation_dir, server_type)
    siblings = tuple(sorted(_sibling_closure(implementation_dir, root)))
    if requested == LEAN:
        return RuntimeChoice(LEAN, "docker.runtime: lean in the config", siblings)
    if requested == NEMO_GYM:
        return RuntimeChoice(NEMO_GYM, "docker.runtime: nemo_gym in the config", siblings)
    missing = missing_from_compat(implementation_dir)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        return RuntimeChoice(NEMO_GYM, f"imports what the compatibility layer lacks: {shown}", siblings)
    if siblings:
        return RuntimeChoice(NEMO_GYM, f"imports other servers' code: {', '.join(siblings[:3])}", siblings)
    return RuntimeChoice(LEAN, "every nemo_gym import is provided by the compatibility layer")


def missing_from_compat(implementation_dir: Path) -> list[str]:
    """`module` or `module.name` for every NeMo Gym import the compatibility layer does not give."""
    provided = compat_names()
    missing: list[str] = []
    for found in _imports(implementation_dir):
        top = found.module.split(".")[0]
        if top != "nemo_gym" and found.module != "resources_servers.gymnasium":
            continue
        if found.module not in provided:
            missing.append(found.module)
            continue
        for name in found.names:
            if name == "*" or name in provided[found.module] or f"{found.module}.{name}" in provided:
                continue
            missing.append(f"{found.module}.{name}")
    return sorted(set(missing))


def sibling_imports(implementation_dir: Path) -> set[str]:
    """`server_type/name` of each other server package this folder's code imports."""
    own = (implementation_dir.parent.name, implementation_dir.name)
    found: set[str] = set()
    for item in _imports(implementation_dir):
        parts = item.module.split(".")
        if parts[0] not in SERVER_PACKAGES:
            continue
        if item.module == "resources_servers.gymnasium":  # the compatibility layer's (NeMo Gym's base class)
            continue
        if len(parts) >= 2:
            if (parts[0], parts[1]) != own:
                found.add(f"{parts[0]}/{parts[1]}")
        else:
            found.update(f"{parts[0]}/{name}" for name in item.names if name != "*" and (parts[0], name) != own)
    return found


def search_root_of(implementation_dir: Path, server_type: str | None = None) -> Path | None:
    """The checkout root above `<root>/<server_type>/<impl>/`, when the folder sits in that layout."""
    parent = implementation_dir.resolve().parent
    if parent.name in SERVER_PACKAGES and (server_type is None or parent.name == server_type):
        return parent.parent
    return None


def _sibling_closure(implementation_dir: Path, root: Path | None) -> set[str]:
    """Sibling servers (present under the same root) this one needs, following their imports too."""
    if root is None:
        return set()
    seen: set[str] = set()
    pending = sorted(sibling_imports(implementation_dir))
    while pending:
        name = pending.pop()
        if name in seen or not (root / name).is_dir():
            continue
        seen.add(name)
        pending.extend(sorted(sibling_imports(root / name) - seen))
    own = implementation_dir.resolve().relative_to(root.resolve()).as_posix()
    seen.discard(own)
    return seen


def _imports(implementation_dir: Path) -> list[_Import]:
    found: list[_Import] = []
    for path in _python_files(implementation_dir):
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, OSError):
            continue
        for node in ast.walk(tree):
            where = f"{path.name}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                found.extend(_Import(alias.name, (), where) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.append(_Import(node.module, tuple(alias.name for alias in node.names), where))
    return found


def _python_files(folder: Path) -> list[Path]:
    files: list[Path] = []
    stack = [folder]
    while stack and len(files) < _MAX_FILES:
        current = stack.pop()
        try:
            entries = sorted(current.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                if entry.name not in _SKIPPED_DIRS and not entry.name.startswith("."):
                    stack.append(entry)
            elif entry.suffix == ".py" and entry.is_file():
                files.append(entry)
    return files
