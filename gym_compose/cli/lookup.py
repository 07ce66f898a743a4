"""What `gym-compose resolve` and `gym-compose list` do, apart from argument parsing."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from gym_compose.config import ConfigRequest, discover, load, redact_for_display, search_roots
from gym_compose.config.host_environment import env_names
from gym_compose.config.search import SELECTOR_FLAGS
from gym_compose.errors import UserError


def print_warnings(warnings: list[str]) -> None:
    for warning in warnings:
        print(warning, file=sys.stderr)


def resolve_command(request: ConfigRequest, cwd: Path | None = None) -> None:
    """The merged config as YAML on stdout (secrets as '****'); everything else on stderr."""
    loaded = load(request, cwd=cwd)
    print_warnings(loaded.warnings)
    shown = redact_for_display(loaded.data, loaded.from_environment)
    sys.stdout.write(yaml.safe_dump(shown, sort_keys=False, allow_unicode=True))
    if loaded.from_environment:
        names = sorted({name for expression in loaded.from_environment.values() for name in env_names(expression)})
        print(f"note: values from the host's environment ({', '.join(names)}) are shown as '****'", file=sys.stderr)
    served = model_lines(loaded.data)
    if served:
        print("models (docs/models.md):", file=sys.stderr)
        for line in served:
            print("  " + line, file=sys.stderr)
    lines = runtime_lines(loaded.data, loaded.search_roots)
    if lines:
        print("runtimes (docs/nemo-gym-runtime.md):", file=sys.stderr)
        for line in lines:
            print("  " + line, file=sys.stderr)


def model_lines(data: dict) -> list[str]:
    """`instance: implementation (what answers)` for each model server instance."""
    from gym_compose.config.constants import MODELS
    from gym_compose.config.model_fill import MOCK, model_instances, model_references

    users = model_references(data)
    lines = []
    for name, implementation in model_instances(data).items():
        block = data[name][MODELS][implementation] or {}
        urls = [str(value) for key, value in block.items() if str(key).endswith("base_url") and value]
        model = next((block[key] for key in ("openai_model", "model") if block.get(key)), None)
        answers = (f"the built-in mock, mode {block.get('mode', 'oracle')}" if implementation == MOCK
                   else ", ".join(urls) + (f", model {model}" if model else "") if urls
                   else "its own engine" + (f", model {model}" if model else ""))
        named_by = users.get(name, [])
        lines.append(f"{name}: {implementation} ({answers})" + (f"; named by {', '.join(named_by[:3])}" if named_by
                                                              else ""))
    return lines


def runtime_lines(data: dict, roots: list[Path]) -> list[str]:
    """`instance: runtime (why)` for each server instance, as the plan would choose."""
    from gym_compose.config import instances
    from gym_compose.plan.planner import source_dir_of
    from gym_compose.plan.runtime_choice import choose_runtime
    from gym_compose.plan.service_spec import read_docker_block

    lines = []
    for instance in instances(data):
        requested = read_docker_block(instance.name, instance.spec.get("docker")).runtime
        try:
            folder = source_dir_of(instance, roots, requested)
        except UserError as error:
            lines.append(f"{instance.name}: - ({error.message})")
            continue
        choice = choose_runtime(folder, requested, instance.server_type)
        lines.append(f"{instance.name}: {choice.runtime} ({choice.reason})")
    return lines


def list_command(search_dirs: list[Path], cwd: Path | None = None) -> None:
    """One aligned row per component a selector can find: selector flag, name, rows (benchmarks:
    the rows of their datasets), config path."""
    from gym_compose.cli.benchmark_rows import benchmark_rows

    roots = search_roots(search_dirs, (cwd or Path.cwd()).resolve())
    components = discover(roots)
    if not components:
        print("nothing found under: " + ", ".join(map(str, roots)), file=sys.stderr)
        return
    rows = [("SELECTOR", "NAME", "ROWS", "PATH")]
    for c in components:
        counted = benchmark_rows(c.path, roots) if c.kind == "benchmark" else ""
        rows.append((SELECTOR_FLAGS[c.kind], c.selector, counted, str(c.path)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for flag, name, counted, path in rows:
        print(f"{flag:<{widths[0]}}  {name:<{widths[1]}}  {counted:>{widths[2]}}  {path}")
