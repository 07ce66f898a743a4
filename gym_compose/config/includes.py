"""Loading `config_paths` trees in NeMo Gym's merge order.

Rules: every file loads once; a file overrides everything it includes, at any depth; of two files
listed side by side, the later one overrides the earlier one and everything the earlier one
included. Both hold when each file merges right after its own includes (a post-order walk),
siblings in listed order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, ListConfig

from gym_compose.config.search import resolve_path, root_of
from gym_compose.config.yaml_files import read_config_file
from gym_compose.errors import UserError


@dataclass(frozen=True)
class ConfigEntry:
    """One `config_paths` entry: as written, and where to look for it first."""

    text: str
    first_root: Path | None = None
    included_by: Path | None = None


@dataclass
class LoadedFile:
    path: Path
    root: Path
    config: DictConfig
    children: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class IncludeResult:
    files_in_merge_order: list[LoadedFile]
    entries: list[str]  # every config_paths entry, as written, in discovery order
    duplicates: list[str]  # entries named more than once (loaded once)


def _locate(entry: ConfigEntry, roots: list[Path]) -> tuple[Path, Path]:
    found = resolve_path(entry.text, roots, entry.first_root)
    if found is None or not found.is_file():
        tried_roots = ([entry.first_root] if entry.first_root else []) + [r for r in roots if r != entry.first_root]
        where = f" (listed in config_paths of {entry.included_by})" if entry.included_by else ""
        if Path(entry.text).is_absolute():
            tried = f"  - {entry.text}"
        else:
            tried = "\n".join(f"  - {root / entry.text}" for root in tried_roots)
        raise UserError(
            f"config file not found: {entry.text}{where}. Tried:\n{tried}",
            hint="check the spelling; relative paths resolve under each search root (--search-dir, "
            "GYM_COMPOSE_SEARCH_PATH, the working directory, this project)",
        )
    if entry.first_root is not None and (found == entry.first_root or entry.first_root in found.parents):
        return found, entry.first_root
    return found, root_of(found, roots)


def _included_entries(loaded: LoadedFile) -> list[str]:
    raw = loaded.config.get("config_paths") if "config_paths" in loaded.config else None
    if raw is None:
        return []
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, (ListConfig, list)) or not all(isinstance(item, str) for item in raw):
        raise UserError(
            f"{loaded.path}: config_paths must be a list of file paths, got {raw!r}",
            hint="write it as config_paths: [path/one.yaml, path/two.yaml]",
        )
    return list(raw)


def load_includes(top_entries: list[ConfigEntry], roots: list[Path]) -> IncludeResult:
    """Load the top entries and everything they include; return the files in merge order."""
    entries: list[ConfigEntry] = []
    seen_texts: set[str] = set()
    for entry in top_entries:
        if entry.text not in seen_texts:
            entries.append(entry)
            seen_texts.add(entry.text)
    top_count = len(entries)
    loaded_files: list[LoadedFile] = []
    index_by_path: dict[Path, int] = {}
    duplicates: list[str] = []
    # entry index -> loaded file index (two spellings of one file load once)
    file_of_entry: list[int] = []

    position = 0
    while position < len(entries):  # entries grows as includes are discovered
        entry = entries[position]
        path, root = _locate(entry, roots)
        if path in index_by_path:
            file_of_entry.append(index_by_path[path])
            if position >= top_count:
                duplicates.append(entry.text)
            position += 1
            continue
        loaded = LoadedFile(path=path, root=root, config=read_config_file(path))
        index_by_path[path] = len(loaded_files)
        loaded_files.append(loaded)
        file_of_entry.append(len(loaded_files) - 1)
        for text in _included_entries(loaded):
            if text in seen_texts:
                duplicates.append(text)
                continue
            seen_texts.add(text)
            entries.append(ConfigEntry(text=text, first_root=root, included_by=path))
            loaded.children.append(len(entries) - 1)  # entry index for now; mapped below
        position += 1

    for loaded in loaded_files:
        loaded.children = [file_of_entry[entry_index] for entry_index in loaded.children]

    merge_order: list[int] = []
    visited: set[int] = set()

    def visit(file_index: int) -> None:
        if file_index in visited:
            return
        visited.add(file_index)
        for child in loaded_files[file_index].children:
            visit(child)
        merge_order.append(file_index)

    for entry_index in range(top_count):
        visit(file_of_entry[entry_index])

    return IncludeResult(
        files_in_merge_order=[loaded_files[i] for i in merge_order],
        entries=[e.text for e in entries],
        duplicates=duplicates,
    )
