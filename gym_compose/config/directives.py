"""NeMo Gym's config directives, applied after every source has merged.

- `_inherit_from: a.b` in a mapping: start from a copy of the value at path `a.b` (from the config as
  it was before any directive ran), merge the local keys over it, and remove `a.b` from the result.
  The string form `key: ${inherit_from:a.b}` takes the value as it is.
- `_copy: a.b` / `${copy:a.b}`: the same, but `a.b` stays.
- `_delete_key: "x, y"`: remove those keys; a key that only arrives through `_inherit_from`/`_copy`
  is removed after the merge.
Directives nest at any depth. A directive inside an inherited value runs too (NeMo Gym leaves those
unprocessed; applying them makes chains of `_inherit_from` work).
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from omegaconf import DictConfig, ListConfig, Node, OmegaConf, open_dict

from gym_compose.config.suggest import did_you_mean
from gym_compose.errors import UserError

INHERIT_FROM = "_inherit_from"
COPY = "_copy"
DELETE_KEY = "_delete_key"
_INHERIT_STRING = "${inherit_from:"
_COPY_STRING = "${copy:"
_MAX_CHAIN = 50

_MISSING_SOURCE = object()


def apply_directives(config: DictConfig, origins: dict[str, str] | None = None) -> list[str]:
    """Apply every directive in place; return warnings."""
    frozen = deepcopy(config)
    warnings: list[str] = []
    with open_dict(config):
        _walk(config, config, frozen, path="", origins=origins or {}, depth=0, warnings=warnings)
    return warnings


def _has(node: DictConfig, key: Any) -> bool:
    """`key in node` is False for a '???' value; keys() still lists it."""
    return key in node.keys()


def _raw(node: DictConfig | ListConfig, key: Any) -> Any:
    """A child without resolving interpolations or tripping over `???`."""
    child = node._get_node(key)
    if isinstance(child, (DictConfig, ListConfig)):
        return child
    return child._value() if isinstance(child, Node) else None


def _walk(node: DictConfig, root: DictConfig, frozen: DictConfig, path: str, origins: dict[str, str], depth: int,
          warnings: list[str]) -> None:
    if depth > _MAX_CHAIN:
        raise UserError(f"_inherit_from/_copy chain at {path or 'the top level'} nests too deep; is there a cycle?")
    for key in list(node.keys()):
        if not _has(node, key):  # removed by an earlier _inherit_from at this level
            continue
        value = _raw(node, key)
        child_path = f"{path}.{key!s}" if path else str(key)
        where = _where(child_path, origins)

        late_deletes: set[str] = set()
        if isinstance(value, DictConfig) and _has(value, DELETE_KEY):
            late_deletes = _delete_present_keys(value, child_path, where)

        if isinstance(value, DictConfig):
            _walk(value, root, frozen, child_path, origins, depth, warnings)
        elif isinstance(value, ListConfig):
            for index in range(len(value)):
                item = _raw(value, index)
                if isinstance(item, DictConfig):
                    _walk(item, root, frozen, f"{child_path}[{index}]", origins, depth, warnings)

        source_path, keeps_source = _directive(value, child_path, where)
        if source_path is None:
            if late_deletes:  # NeMo Gym ignores these; say so, since it is most likely a typo
                warnings.append(_unknown_deletes_message(late_deletes, value, child_path, where) + "; ignored")
            continue

        source = _lookup(frozen, source_path, child_path, where)
        if not keeps_source:
            _remove(root, source_path)
        if source is _MISSING_SOURCE:
            node[key] = "???"
            continue
        if isinstance(value, DictConfig):
            if not isinstance(source, DictConfig):
                raise UserError(
                    f"{child_path}{where}: inherits from {'.'.join(source_path)}, which is not a mapping",
                    hint="_inherit_from/_copy in a mapping must name another mapping",
                )
            merged = OmegaConf.merge(source, value)
        else:
            merged = deepcopy(source)
        node[key] = merged
        inherited = _raw(node, key)
        if isinstance(inherited, DictConfig):
            with open_dict(inherited):
                _walk_self(inherited, root, frozen, child_path, origins, depth + 1, warnings)
                for doomed in late_deletes:
                    if not _has(inherited, doomed):
                        raise UserError(_unknown_deletes_message({doomed}, inherited, child_path, where))
                    del inherited[doomed]


def _walk_self(value: DictConfig, root: DictConfig, frozen: DictConfig, path: str, origins: dict[str, str], depth: int,
               warnings: list[str]) -> None:
    """Run directives that came in with an inherited value, including one at its own top."""
    holder = OmegaConf.create({"_": value})
    with open_dict(holder):
        _walk(holder, root, frozen, path, origins, depth, warnings)
    result = _raw(holder, "_")
    value.clear()
    if isinstance(result, DictConfig):
        for k in result.keys():
            value[k] = _raw(result, k)


def _delete_present_keys(value: DictConfig, path: str, where: str) -> set[str]:
    spec = _raw(value, DELETE_KEY)
    del value[DELETE_KEY]
    if isinstance(spec, ListConfig):
        names = [str(item).strip() for item in spec]
    elif isinstance(spec, str):
        names = [part.strip() for part in spec.split(",")]
    else:
        raise UserError(f"{path}.{DELETE_KEY}{where}: expected a comma-separated string of keys, got {spec!r}")
    wanted = {name for name in names if name}
    present = {name for name in wanted if _has(value, name)}
    for name in present:
        del value[name]
    return wanted - present


def _unknown_deletes_message(names: set[str], value: Any, path: str, where: str) -> str:
    keys = [str(k) for k in value.keys()] if isinstance(value, DictConfig) else []
    name = sorted(names)[0]
    return f"{path}.{DELETE_KEY}{where}: cannot delete {name!r}, no such key{did_you_mean(name, keys)}"


def _directive(value: Any, path: str, where: str) -> tuple[list[str] | None, bool]:
    """(source path, keeps source) when `value` is an inherit/copy directive."""
    if isinstance(value, str):
        for prefix, keeps in ((_INHERIT_STRING, False), (_COPY_STRING, True)):
            if value.startswith(prefix) and value.endswith("}"):
                return _split(value[len(prefix):-1], path, where), keeps
        return None, False
    if isinstance(value, DictConfig):
        if _has(value, INHERIT_FROM) and _has(value, COPY):
            raise UserError(f"{path}{where}: has both {INHERIT_FROM} and {COPY}; keep one")
        for directive, keeps in ((INHERIT_FROM, False), (COPY, True)):
            if _has(value, directive):
                source = _raw(value, directive)
                del value[directive]
                if not isinstance(source, str) or not source.strip():
                    raise UserError(
                        f"{path}.{directive}{where}: expected the dotted path of another key, got {source!r}")
                return _split(source, path, where), keeps
    return None, False


def _split(source: str, path: str, where: str) -> list[str]:
    parts = [part for part in source.strip().split(".")]
    if not all(parts):
        raise UserError(f"{path}{where}: {source!r} is not a dotted key path")
    return parts


def _lookup(frozen: DictConfig, source_path: list[str], path: str, where: str) -> Any:
    node: Any = frozen
    for part in source_path:
        if not isinstance(node, DictConfig) or not _has(node, part):
            siblings = [str(k) for k in node.keys()] if isinstance(node, DictConfig) else []
            shown = ".".join(source_path)
            raise UserError(
                f"{path}{where}: inherits from {shown!r}, which is not in the merged config"
                f"{did_you_mean(part, siblings)}",
                hint="_inherit_from and _copy take the dotted path of a key defined in some loaded config",
            )
        if OmegaConf.is_missing(node, part):
            return _MISSING_SOURCE
        node = _raw(node, part)
    return node


def _remove(root: DictConfig, source_path: list[str]) -> None:
    node: Any = root
    for part in source_path[:-1]:
        if not isinstance(node, DictConfig) or not _has(node, part):
            return  # already removed: several configs may inherit from one source
        node = _raw(node, part)
    if isinstance(node, DictConfig) and _has(node, source_path[-1]):
        with open_dict(node):
            del node[source_path[-1]]


def _where(path: str, origins: dict[str, str]) -> str:
    origin = origins.get(path.split(".")[0].split("[")[0])
    return f" (from {origin})" if origin else ""
