"""The package's layers, read from its import graph: every `import`, at the top of a module or
inside a function (a lazy import is still a dependency).

docs/architecture.md draws the layers: the ground floor (contract, errors, console, paths,
interrupts; the standard library only), the host side cli -> config -> plan -> render -> engine with stack, runs and
view above them, and the container packages (server, collect, sandbox, net, metrics), which ship
in the base image (`CONTAINER_MODULES`) and import nothing of the host side. Only `engine/` spells
Docker command lines.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gym_compose
from gym_compose.engine.images.lean_images import CONTAINER_MODULES

PACKAGE = Path(gym_compose.__file__).resolve().parent
GROUND_FLOOR = {"contract", "errors", "console", "paths", "interrupts", "child_process"}
HOST_PACKAGES = {"cli", "config", "plan", "render", "engine", "stack", "runs", "view", "api"}
CONTAINER_PACKAGES = {"server", "collect", "sandbox", "net", "metrics"}
# What each host layer must not import: the layers that come after it, and the others' business.
FORBIDDEN = {
    "config": {"plan", "render", "engine", "stack", "runs", "cli", "view", "api"},
    "plan": {"render", "engine", "stack", "runs", "cli", "view", "api"},
    "render": {"engine", "stack", "runs", "cli", "view", "api"},
    "engine": {"stack", "runs", "cli", "view", "api"},
    "stack": {"runs", "cli", "view", "api"},
    "runs": {"cli", "api"},
    "view": {"plan", "render", "engine", "stack", "runs", "cli", "api"},
    # the Python API (a façade over config, plan, stack and the collector's calls): the CLI may
    # call it, it never calls the CLI
    "api": {"cli"},
}
HOST_ONLY_LIBRARIES = {"typer", "click", "hydra", "omegaconf", "python_on_whales"}
DOCKER_DOOR = {"run_docker", "start_docker", "run_docker_attached", "compose_args"}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # what it imports: a module of ours (dotted) or a library
    line: int
    optional: bool = False  # inside `try: ... except ImportError`: used when it is there

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.target}"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def our_modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(path): path for path in sorted(package.rglob("*.py"))}


def optional_imports(tree: ast.AST) -> set[int]:
    """The import statements inside a `try` that catches ImportError (ids of their nodes)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(handler.type, ast.Name) and handler.type.id in ("ImportError", "ModuleNotFoundError")
                for handler in node.handlers):
            found |= {id(inner) for statement in node.body for inner in ast.walk(statement)
                      if isinstance(inner, (ast.Import, ast.ImportFrom))}
    return found


def imports_of(name: str, path: Path, known: set[str]) -> Iterator[Import]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    optional = optional_imports(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, node.lineno, id(node) in optional)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:  # `from pkg import module` imports the module
                candidate = f"{module}.{alias.name}"
                yield Import(name, candidate if candidate in known else module, node.lineno, id(node) in optional)


def graph(package: Path = PACKAGE) -> list[Import]:
    modules = our_modules(package)
    return [found for name, path in modules.items() for found in imports_of(name, path, set(modules))]


def layer(module: str) -> str | None:
    """gym_compose.plan.model -> plan; gym_compose.contract -> contract; a library -> None."""
    parts = module.split(".")
    if parts[0] != "gym_compose":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def offenders(imports: list[Import], rule) -> list[str]:
    return sorted(str(found) for found in imports if rule(found))


IMPORTS = graph()


def test_the_graph_sees_top_level_and_lazy_imports():
    assert any(str(i).startswith("gym_compose.stack.lifecycle") and i.target == "gym_compose.stack.swe_preflight"
               for i in IMPORTS)  # imported inside up_command
    assert {i.target for i in IMPORTS if i.source == "gym_compose.engine.images.build_context"} >= {
        "gym_compose.engine.images.saved_images"}  # `from gym_compose.engine.images import saved_images`


def test_the_ground_floor_imports_only_the_standard_library_and_itself():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    assert offenders(IMPORTS, lambda i: layer(i.source) in GROUND_FLOOR and (
        layer(i.target) not in GROUND_FLOOR if layer(i.target) else i.target.split(".")[0] not in stdlib)) == []


def test_each_host_layer_imports_nothing_of_the_layers_that_come_after_it():
    assert offenders(IMPORTS, lambda i: layer(i.target) in FORBIDDEN.get(layer(i.source) or "", ())) == []


def test_the_container_packages_import_only_what_the_base_image_ships():
    shipped = {name.removesuffix(".py") for name in CONTAINER_MODULES}
    assert CONTAINER_PACKAGES <= shipped
    assert offenders(IMPORTS, lambda i: layer(i.source) in CONTAINER_PACKAGES and (
        layer(i.target) not in shipped if layer(i.target)
        else i.target.split(".")[0] in HOST_ONLY_LIBRARIES and not i.optional)) == []


def test_every_module_belongs_to_a_layer():
    assert {layer(name) for name in our_modules()} <= GROUND_FLOOR | HOST_PACKAGES | CONTAINER_PACKAGES | {
        "__init__", "__main__"}


def test_no_two_packages_import_each_other_even_through_others():
    edges: dict[str, set[str]] = {}
    for found in IMPORTS:
        source, target = layer(found.source), layer(found.target)
        if target and source != target and target not in ("__init__",):
            edges.setdefault(source or "", set()).add(target)
    cycle = find_cycle(edges)
    assert cycle is None, "packages import each other: " + " -> ".join(cycle or [])


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for after in sorted(edges.get(node, ())):
            if state.get(after) == "open":
                return path[path.index(after):] + [after]
            if after not in state and (cycle := visit(after)):
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for start in sorted(edges):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def docker_command_lines(path: Path) -> Iterator[int]:
    """Lines where a module starts Docker itself or builds its command line: the engine's door
    (run_docker, start_docker, compose_args), a list literal that starts with "docker" or
    "compose", or subprocess beside a "docker" string."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    uses_subprocess = any(isinstance(node, (ast.Import, ast.ImportFrom)) and "subprocess" in (
        [a.name for a in node.names] + [getattr(node, "module", None) or ""]) for node in ast.walk(tree))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in DOCKER_DOOR or isinstance(node, ast.Attribute) and (
                node.attr in DOCKER_DOOR):
            yield node.lineno
        elif isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant) and (
                node.elts[0].value in ("docker", "compose")):
            yield node.lineno
        elif uses_subprocess and isinstance(node, ast.Constant) and node.value == "docker":
            yield node.lineno


def test_only_the_engine_spells_docker_command_lines():
    found = [f"{name}:{line}" for name, path in our_modules().items() if layer(name) != "engine"
             for line in docker_command_lines(path)]
    assert found == []
