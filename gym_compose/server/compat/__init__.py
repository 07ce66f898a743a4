"""NeMo Gym import names for user app.py files, served by this runtime's classes.

`install()` registers `nemo_gym.*` and `resources_servers.gymnasium` in sys.modules, only when the
real NeMo Gym package is not importable. It covers the imports NeMo Gym's own example servers use
(base_resources_server, server_utils, openai_utils, episode_types, config_types, verifier_fixture,
global_config, reward_profile) and NeMo Gym's sandbox API (`nemo_gym.sandbox`, served by gym_compose.sandbox).
NeMo Gym targets Python 3.13 and the lean runtime runs 3.11: where the two differ in a way NeMo
Gym's servers rely on, `install()` gives 3.11 the newer behaviour (`importlib.resources.files` of
a module, below).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any, Callable

from gym_compose.server.compat.names import MODULES


def install(force: bool = False) -> bool:
    """Register the compatibility modules; False when the real NeMo Gym is importable."""
    if not force and "nemo_gym" not in sys.modules and importlib.util.find_spec("nemo_gym") is not None:
        return False
    if not force and isinstance(sys.modules.get("nemo_gym"), types.ModuleType) \
            and not getattr(sys.modules["nemo_gym"], "__gym_compose_compat__", False):
        return False
    for module_name, attributes in MODULES.items():
        module = sys.modules.get(module_name)
        if module is None or getattr(module, "__gym_compose_compat__", False):
            module = types.ModuleType(module_name, f"gym-compose compatibility shim for {module_name}")
            module.__gym_compose_compat__ = True  # type: ignore[attr-defined]
            module.__path__ = []  # a package, so submodules can be imported
            sys.modules[module_name] = module
        module.__dict__["__getattr__"] = _filled_on_first_use(module, attributes)
        parent, _, child = module_name.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, module)
    _resources_of_a_module()
    return True


def _resources_of_a_module() -> None:
    """`importlib.resources.files(anchor)` takes a module as well as a package from Python 3.12 on
    (the module's own folder); 3.11 raises TypeError "... is not a package". grl_sokoban's shim of
    pkg_resources passes gym_sokoban's module names, so its moves failed on 3.11."""
    import importlib.resources as resources

    if sys.version_info >= (3, 12) or getattr(resources.files, "__gym_compose_compat__", False):
        return
    original = resources.files

    def files(anchor: Any) -> Any:
        try:
            return original(anchor)
        except TypeError:
            module = importlib.import_module(anchor) if isinstance(anchor, str) else anchor
            spec = getattr(module, "__spec__", None)
            if spec is None or spec.submodule_search_locations is not None or not spec.parent:
                raise
            return original(spec.parent)

    files.__gym_compose_compat__ = True  # type: ignore[attr-defined]
    resources.files = files  # type: ignore[assignment]


def _filled_on_first_use(module: types.ModuleType, attributes: Callable[[], dict[str, Any]]) -> Callable[[str], Any]:
    """A module `__getattr__` (PEP 562) that imports the runtime names a shim exposes the first time
    one is asked for: the shims import most of the runtime (the sandbox client, the collector's
    metrics, gymnasium), a part of a server's start that an app.py using two names need not pay
    (docs/performance.md)."""

    def fill(name: str) -> Any:
        if name.startswith("__") and name != "__all__":  # `import *` asks for __all__, then reads the names
            raise AttributeError(name)
        module.__dict__.pop("__getattr__", None)
        for key, value in attributes().items():
            module.__dict__.setdefault(key, value)
        try:
            return module.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}") from None

    return fill


def register_own_package(server_type: str, implementation: str, server_dir: Path) -> None:
    """Make `<server_type>.<implementation>` the server's own folder, as in a NeMo Gym checkout.

    NeMo Gym servers import their own modules by their checkout path (`from
    resources_servers.bird_sql.eval_utils import ...`); the lean image holds the code at
    /srv/server, so the package is registered by name with that folder as its search path."""
    name = f"{server_type}.{implementation}"
    if name in sys.modules:
        return
    parent = sys.modules.get(server_type)
    if parent is None:
        parent = types.ModuleType(server_type)
        parent.__path__ = []
        sys.modules[server_type] = parent
    spec = importlib.util.spec_from_file_location(name, server_dir / "__init__.py",
                                                  submodule_search_locations=[str(server_dir)])
    if spec is None or spec.loader is None or not (server_dir / "__init__.py").is_file():
        package = types.ModuleType(name)
        package.__path__ = [str(server_dir)]
        sys.modules[name] = package
    else:
        package = importlib.util.module_from_spec(spec)
        sys.modules[name] = package
        spec.loader.exec_module(package)
    setattr(parent, implementation, package)
