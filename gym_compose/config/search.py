"""Where configs are found: search roots, named selectors and relative paths.

Every selector and relative path is tried under each root in order, in this project's layout
(`server_images/<impl>/configs/` for servers with an image of their own, `configs/<name>/` for
named configs that build no image: the built-in model and agent types, shared blocks) and in
NeMo Gym's (`resources_servers/<impl>/configs/`, ...), so that a NeMo Gym checkout passed as
`--search-dir` resolves with NeMo Gym's own paths.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gym_compose.config.suggest import close_matches
from gym_compose.contract import AGENTS, ENVIRONMENT_SERVERS, MODELS, RESOURCES_SERVERS
from gym_compose.errors import UserError
from gym_compose.paths import PROJECT_ROOT

SEARCH_PATH_ENV = "GYM_COMPOSE_SEARCH_PATH"
SERVER_IMAGES = "server_images"
CONFIGS = "configs"

# NeMo Gym's top-level folder for each selector that names a server implementation.
NEMO_GYM_SERVER_FOLDERS = {
    "resources_server": RESOURCES_SERVERS,
    "model_type": MODELS,
    "agent_type": AGENTS,
}
SELECTOR_FLAGS = {
    "resources_server": "--resources-server",
    "model_type": "--model-type",
    "agent_type": "--agent-type",
    "benchmark": "--benchmark",
    "environment": "--environment",
}
# NeMo Gym loads selector files in this category order, whatever the order on the command line.
SELECTOR_ORDER = ("benchmark", "environment", "resources_server", "model_type", "agent_type")


def search_roots(search_dirs: Iterable[Path], cwd: Path) -> list[Path]:
    """--search-dir roots, then GYM_COMPOSE_SEARCH_PATH, then cwd, then this project; no duplicates."""
    from_env = [Path(p) for p in os.environ.get(SEARCH_PATH_ENV, "").split(":") if p.strip()]
    candidates = [*(Path(d) for d in search_dirs), *from_env, cwd]
    if (PROJECT_ROOT / SERVER_IMAGES).is_dir():
        candidates.append(PROJECT_ROOT)
    roots: list[Path] = []
    for candidate in candidates:
        root = (cwd / candidate.expanduser()).resolve()
        if root not in roots:
            roots.append(root)
    return roots


def _selector_candidates(kind: str, name: str, flavor: str | None) -> list[str]:
    """Root-relative paths a selector may name, most specific layout first."""
    if kind in NEMO_GYM_SERVER_FOLDERS:
        file = f"{flavor or name}.yaml"
        return [f"{SERVER_IMAGES}/{name}/configs/{file}", f"{CONFIGS}/{name}/{file}",
                f"{NEMO_GYM_SERVER_FOLDERS[kind]}/{name}/configs/{file}"]
    if kind == "benchmark":
        if flavor:
            return [f"benchmarks/{name}/{flavor}.yaml", f"benchmarks/{name}/{flavor}/config.yaml"]
        return [f"benchmarks/{name}/config.yaml"]
    if kind == "environment":
        if flavor:
            return [
                f"environments/{name}/{flavor}.yaml",
                f"environments/{name}/{flavor}/config.yaml",
                f"{SERVER_IMAGES}/{name}/configs/{flavor}.yaml",
                f"{CONFIGS}/{name}/{flavor}.yaml",
            ]
        return [f"environments/{name}/config.yaml", f"{SERVER_IMAGES}/{name}/configs/{name}.yaml",
                f"{CONFIGS}/{name}/{name}.yaml"]
    raise ValueError(f"unknown selector kind {kind!r}")


@dataclass(frozen=True)
class FoundFile:
    path: Path  # absolute
    root: Path  # the search root it was found under; its relative paths resolve from here


def find_selector_file(kind: str, value: str, roots: list[Path]) -> FoundFile:
    """The config file a selector such as `--resources-server X/F` names."""
    flag = SELECTOR_FLAGS[kind]
    name, _, flavor = value.strip().strip("/").partition("/")
    if not name:
        raise UserError(f"{flag} needs a name, got {value!r}", hint=f"e.g. {flag} NAME or {flag} NAME/FLAVOR")
    candidates = _selector_candidates(kind, name, flavor or None)
    for root in roots:
        for relative in candidates:
            if (root / relative).is_file():
                return FoundFile(root / relative, root)
    tried = "\n".join(f"  - {root / relative}" for root in roots for relative in candidates)
    known = sorted({component.selector for component in discover(roots) if component.kind == kind})
    suggestions = close_matches(value, known) or close_matches(name, {k.split("/")[0] for k in known})
    hint = (
        f"did you mean {' or '.join(repr(s) for s in suggestions)}?"
        if suggestions
        else "run `gym-compose list` to see every name, or add a root with --search-dir"
    )
    raise UserError(f"{flag} {value}: no config found. Tried:\n{tried}", hint=hint)


# NeMo Gym's server folders, which this project keeps under server_images/ (or, for configs of
# servers with no image of their own, under configs/).
_NEMO_GYM_FOLDERS = (*NEMO_GYM_SERVER_FOLDERS.values(), ENVIRONMENT_SERVERS)


def _alternative_spellings(relative: str) -> list[str]:
    """`resources_servers/X/configs/F.yaml` is also `server_images/X/configs/F.yaml` and
    `configs/X/F.yaml` here."""
    spellings = [relative]
    folder, _, rest = relative.partition("/")
    if folder in _NEMO_GYM_FOLDERS and rest:
        spellings.append(f"{SERVER_IMAGES}/{rest}")
        implementation, _, inside = rest.partition("/")
        if inside.startswith("configs/"):
            spellings.append(f"{CONFIGS}/{implementation}/{inside[len('configs/'):]}")
    return spellings


def resolve_path(path: str | Path, roots: list[Path], first_root: Path | None = None) -> Path | None:
    """Where a relative path from a config (config_paths, jsonl_fpath, ...) points, or None.

    Tried under `first_root` (the root of the file that wrote it), then every search root; a NeMo Gym
    server path (`resources_servers/X/...`) also matches this project's `server_images/X/...`.
    """
    found = find_path(path, roots, first_root)
    return found.path if found is not None else None


def find_path(path: str | Path, roots: list[Path], first_root: Path | None = None) -> FoundFile | None:
    """`resolve_path`, also saying which root the path was found under (an absolute path: its folder)."""
    path = Path(path).expanduser()
    if path.is_absolute():
        return FoundFile(path, path.parent) if path.exists() else None
    ordered = ([first_root] if first_root is not None else []) + [r for r in roots if r != first_root]
    for spelling in _alternative_spellings(path.as_posix()):
        for root in ordered:
            if (root / spelling).exists():
                return FoundFile(root / spelling, root)
    return None


def root_of(path: Path, roots: list[Path]) -> Path:
    """The search root a found file lives under (the deepest one), else its own folder."""
    containing = [root for root in roots if path == root or root in path.parents]
    return max(containing, key=lambda r: len(r.parts)) if containing else path.parent


def find_implementation_dir(server_type: str, implementation: str, roots: Iterable[Path]) -> Path | None:
    """The folder that holds one implementation: `server_images/<impl>/`, `<server_type>/<impl>/`
    (NeMo Gym checkout) or `environments/<impl>/`; the first that exists under the roots in order."""
    for root in roots:
        for folder in (Path(SERVER_IMAGES) / implementation, Path(server_type) / implementation,
                       Path("environments") / implementation):
            if (Path(root) / folder).is_dir():
                return Path(root) / folder
    return None


@dataclass(frozen=True)
class Component:
    kind: str  # a key of SELECTOR_FLAGS
    selector: str  # what to pass to the selector: NAME or NAME/FLAVOR
    path: Path


def _selected_kind(config_file: Path, implementation: str) -> str | None:
    """What a server_images/<impl>/configs/*.yaml or configs/<impl>/*.yaml file selects, judged by
    the server type that defines `<impl>` in it (None: a shared block that defines no server)."""
    import yaml

    try:
        data = yaml.safe_load(config_file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None
    kinds = {RESOURCES_SERVERS: "resources_server", MODELS: "model_type", AGENTS: "agent_type",
             ENVIRONMENT_SERVERS: "environment"}
    found = None
    for instance in data.values() if isinstance(data, dict) else []:
        if not isinstance(instance, dict):
            continue
        for server_type, kind in kinds.items():
            implementations = instance.get(server_type)
            if isinstance(implementations, dict):
                if implementation in implementations:
                    return kind
                found = found or kind
    return found


def _flavored(name: str, flavor: str, default: str) -> str:
    return name if flavor == default else f"{name}/{flavor}"


def discover(roots: Iterable[Path]) -> list[Component]:
    """Every component a selector can find under the roots; a name under an earlier root hides the same
    name under a later one, as in selector lookup."""
    found: dict[tuple[str, str], Component] = {}

    def add(kind: str, selector: str, path: Path) -> None:
        found.setdefault((kind, selector), Component(kind, selector, path))

    for root in roots:
        own_layout = [(config, config.parent.parent.name)
                      for config in sorted(root.glob(f"{SERVER_IMAGES}/*/configs/*.yaml"))]
        own_layout += [(config, config.parent.name) for config in sorted(root.glob(f"{CONFIGS}/*/*.yaml"))]
        for config, name in own_layout:
            kind = _selected_kind(config, name)
            if kind:
                add(kind, _flavored(name, config.stem, name), config)
        for kind, folder in NEMO_GYM_SERVER_FOLDERS.items():
            for config in sorted(root.glob(f"{folder}/*/configs/*.yaml")):
                name = config.parent.parent.name
                add(kind, _flavored(name, config.stem, name), config)
        for kind, folder in (("benchmark", "benchmarks"), ("environment", "environments")):
            for config in sorted(root.glob(f"{folder}/*/*.yaml")):
                # a benchmark is a folder with a config.yaml (its other files are flavors); shared
                # folders such as benchmarks/prompts/ are not benchmarks
                if config.stem != "manifest" and (config.parent / "config.yaml").is_file():
                    add(kind, _flavored(config.parent.name, config.stem, "config"), config)
    return sorted(found.values(), key=lambda c: (SELECTOR_ORDER.index(c.kind), c.selector))
