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
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

LEAN = "lean"
NEMO_GYM = "nemo_gym"
# Top-level folders of a NeMo Gym checkout whose servers import one another as packages.
SERVER_PACKAGES = ("resources_servers", "responses_api_agents", "responses_api_models", "environment_servers")
_SKIPPED_DIRS = {"tests", "test", ".venv", "venv", "__pycache__", "node_modules", ".git", "data"}
_MAX_FILES = 400
# Third-party top-level modules importable in the lean base image (docker/runtime-requirements.txt
# and what those pull in; `pkgutil.iter_modules()` in gym-compose/base).
LEAN_BASE_MODULES = frozenset({
    "annotated_doc", "annotated_types", "anyio", "certifi", "click", "dotenv", "fastapi", "h11", "httpcore",
    "httptools", "httpx", "idna", "itsdangerous", "orjson", "pip", "pkg_resources", "pydantic", "pydantic_core",
    "setuptools", "starlette", "typing_extensions", "typing_inspection", "uvicorn", "uvloop", "watchfiles",
    "websockets", "yaml", "gym_compose",
})
# Distributions whose import name is not their normalised project name.
_IMPORT_NAMES = {"pyyaml": "yaml", "scikit_learn": "sklearn", "pillow": "PIL", "beautifulsoup4": "bs4",
                 "opencv_python": "cv2", "opencv_python_headless": "cv2", "python_dateutil": "dateutil",
                 "protobuf": "google", "attrs": "attr", "pyjwt": "jwt", "python_dotenv": "dotenv",
                 "llama_cpp_python": "llama_cpp"}
_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


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
    from gym_compose.server.compat.exported import EXPORTED

    return {module: frozenset(names) for module, names in EXPORTED.items()}


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
    unprovided = unprovided_packages(implementation_dir)
    if unprovided:
        # nemo-gym's own dependencies (ray, numpy, openai, ...) are in the NeMo Gym runtime only
        return RuntimeChoice(NEMO_GYM, f"imports packages neither its requirements nor the lean base give: "
                                       f"{', '.join(unprovided[:3])}", siblings)
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


def unprovided_packages(implementation_dir: Path, entrypoint: str = "app.py") -> list[str]:
    """Third-party top-level modules the entrypoint (and the server's own modules it imports)
    import that neither the lean base image nor the server's own requirements install: NeMo Gym
    servers lean on nemo-gym's dependencies (numpy, ray, openai, ...). Data-preparation scripts
    beside app.py are not followed."""
    from gym_compose.errors import UserError
    from gym_compose.plan.requirements import native_requirements, server_requirements

    try:
        requirements = server_requirements(implementation_dir)
    except UserError:
        requirements = ""
    requirements += "\n" + native_requirements(implementation_dir)  # compiled in the image's build stage
    provided = set(LEAN_BASE_MODULES)
    for line in requirements.splitlines():
        match = _REQUIREMENT_NAME.match(line)
        if match and not line.lstrip().startswith("-"):
            name = re.sub(r"[-.]+", "_", match.group(1)).lower()
            provided.update({name, _IMPORT_NAMES.get(name, name)})
    missing: set[str] = set()
    for found in _entrypoint_imports(implementation_dir, entrypoint):
        top = found.module.split(".")[0]
        if top in sys.stdlib_module_names or top in provided or top == "nemo_gym" \
                or top in SERVER_PACKAGES or top.startswith("_"):
            continue
        missing.add(top)
    return sorted(missing)


def _entrypoint_imports(folder: Path, entrypoint: str) -> list[_Import]:
    """Imports of the entrypoint and, transitively, of the server's own modules it imports."""
    own_prefix = f"{folder.parent.name}.{folder.name}."
    pending = [folder / entrypoint]
    seen: set[Path] = set()
    found: list[_Import] = []
    while pending and len(seen) < _MAX_FILES:
        path = pending.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        for item in _file_imports(path, folder):
            module = item.module[len(own_prefix):] if item.module.startswith(own_prefix) else item.module
            local = _local_module(folder, module) or (
                _local_module(path.parent, module) if path.parent != folder else None)
            if local is not None:
                pending.append(local)
                continue
            if item.module.startswith(own_prefix) or item.module == own_prefix[:-1]:
                continue
            found.append(item)
    return found


def _local_module(folder: Path, module: str) -> Path | None:
    base = folder.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return base if base.is_dir() and module else None


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


def sibling_file_references(implementation_dir: Path) -> set[str]:
    """`server_type/name` of each other server whose files this folder's code reads by path from its
    own: `Path(__file__).parent.parent / "<name>" / ...` (or `.parents[1]`), as swebench_pro reads
    swebench's anti_cheat_setup.sh. Those folders must be in the image beside it, as in a checkout."""
    server_type = implementation_dir.parent.name
    found: set[str] = set()
    for path in _python_files(implementation_dir):
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, OSError):
            continue
        depth = len(path.parent.relative_to(implementation_dir).parts)
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) \
                    and isinstance(node.right, ast.Constant) and isinstance(node.right.value, str) \
                    and _parents_of_file(node.left) == depth + 2 and node.right.value != implementation_dir.name:
                found.add(f"{server_type}/{node.right.value}")
    return found


def _parents_of_file(node: ast.AST) -> int:
    """How many folders up from `__file__` an expression `Path(__file__).parent...` (or
    `.parents[N]`) goes; 0 for anything else."""
    ups = 0
    while True:
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            ups, node = ups + 1, node.value
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "parents" and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, int):
            ups, node = ups + node.slice.value + 1, node.value.value
        elif isinstance(node, ast.Call) and node.args and isinstance(node.func, (ast.Name, ast.Attribute)):
            node = node.args[0]  # Path(__file__); `.resolve()` (no arguments) is the next branch
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "resolve":
            node = node.func.value
        else:
            return ups if isinstance(node, ast.Name) and node.id == "__file__" else 0


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
    pending = sorted(sibling_imports(implementation_dir) | sibling_file_references(implementation_dir))
    while pending:
        name = pending.pop()
        if name in seen or not (root / name).is_dir():
            continue
        seen.add(name)
        pending.extend(sorted(sibling_imports(root / name) - seen))
        pending.extend(sorted(sibling_file_references(root / name) - seen))
    own = implementation_dir.resolve().relative_to(root.resolve()).as_posix()
    seen.discard(own)
    return seen


def _imports(implementation_dir: Path) -> list[_Import]:
    found: list[_Import] = []
    for path in _python_files(implementation_dir):
        found.extend(_file_imports(path))
    return found


def _file_imports(path: Path, folder: Path | None = None) -> list[_Import]:
    """Absolute imports of one file; with `folder`, relative ones too, as folder-relative modules."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return []
    found: list[_Import] = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found.extend(_Import(alias.name, (), where) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append(_Import(node.module, tuple(alias.name for alias in node.names), where))
        elif isinstance(node, ast.ImportFrom) and node.level and folder is not None:
            package = path.parent
            for _ in range(node.level - 1):
                package = package.parent
            try:
                prefix = ".".join(package.relative_to(folder).parts)
            except ValueError:
                continue
            modules = [node.module] if node.module else [alias.name for alias in node.names]
            found.extend(_Import(".".join(filter(None, (prefix, module))), (), where) for module in modules)
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
