"""Checks on the merged config: instance shape, references, domains, datasets, misspellings."""

from __future__ import annotations

import difflib
from typing import Any

from gym_compose.config.constants import (
    DATASET_TYPES,
    DOMAINS,
    REFERENCE_FIELDS,
    RESERVED_KEYS,
    RESOURCES_SERVERS,
    SERVER_TYPES,
)
from gym_compose.config.instances import ServerInstance, instances, without_entrypoint
from gym_compose.config.suggest import close_matches, did_you_mean
from gym_compose.errors import UserError


def validate(data: dict[str, Any], origins: dict[str, str], interpolated: frozenset[str] = frozenset()) -> list[str]:
    """Raise UserError on the first problem; return warnings for what is merely suspicious.
    `interpolated`: top-level keys the config reads through `${key}` (NeMo Gym's `judge_base_url`), no typos."""
    warnings: list[str] = []
    for name, value in data.items():
        if name in RESERVED_KEYS or (name in interpolated and not isinstance(value, dict)):
            continue
        if isinstance(value, dict):
            _check_shape(name, value, _from(name, origins))
        elif close_matches(name, RESERVED_KEYS):
            warnings.append(f"top-level key {name!r}{_from(name, origins)} is not a known setting"
                            f"{did_you_mean(name, RESERVED_KEYS)}")
    warnings += _check_blocks_without_entrypoint(data, origins)
    found = instances(data)
    by_name = {i.name: i for i in found}
    for instance in found:
        where = _from(instance.name, origins)
        _check_fields(instance, where)
        _check_references(instance, by_name, where)
        _check_datasets(instance, where)
    return warnings


def _check_blocks_without_entrypoint(data: dict[str, Any], origins: dict[str, str]) -> list[str]:
    """NeMo Gym treats a server-shaped block without `entrypoint` as data; so does this, with a note.

    A misspelt `entrypoint` is an error. (A config with no server at all fails when a stack is
    planned, with NeMo Gym's "No server instances are configured" error.)
    """
    blocks = without_entrypoint(data)
    for block in blocks:
        misspelt = did_you_mean("entrypoint", [str(k) for k in block.spec])
        if misspelt:
            path = f"{block.name}.{block.server_type}.{block.implementation}"
            raise UserError(f"{path}{_from(block.name, origins)}: missing 'entrypoint'{misspelt}",
                            hint=f"add entrypoint: app.py (or ++{path}.entrypoint=app.py)")
    return [f"note: {block.name}.{block.server_type}.{block.implementation}{_from(block.name, origins)}: a server "
            "type but no 'entrypoint', so not a server (NeMo Gym treats such a block as config data); add "
            "entrypoint: app.py to run it" for block in blocks]


def _from(name: str, origins: dict[str, str]) -> str:
    origin = origins.get(name)
    return f" (from {origin})" if origin else ""


def _check_shape(name: str, value: dict[str, Any], where: str) -> None:
    server_types = [key for key in value if key in SERVER_TYPES]
    if not server_types:
        for key in value:
            if isinstance(value[key], dict) and close_matches(str(key), SERVER_TYPES):
                raise UserError(
                    f"instance {name!r}{where}: unknown server type {key!r}{did_you_mean(str(key), SERVER_TYPES)}",
                    hint="server types are " + ", ".join(SERVER_TYPES),
                )
        return  # a plain mapping that configs may interpolate from
    if len(server_types) > 1:
        raise UserError(
            f"instance {name!r}{where}: has {len(server_types)} server types ({', '.join(server_types)}); "
            "an instance has exactly one",
            hint="split it into one top-level instance per server",
        )
    server_type = server_types[0]
    implementations = value[server_type]
    if not isinstance(implementations, dict) or len(implementations) != 1:
        count = len(implementations) if isinstance(implementations, dict) else 0
        listed = (f" ({', '.join(map(str, implementations))})"
                  if isinstance(implementations, dict) and implementations else "")
        raise UserError(
            f"instance {name!r}{where}: {server_type} must hold exactly one implementation, found {count}{listed}",
            hint=f"write {name}: {{{server_type}: {{<implementation>: {{entrypoint: app.py, ...}}}}}}",
        )
    implementation, spec = next(iter(implementations.items()))
    if not isinstance(spec, dict):
        raise UserError(
            f"instance {name!r}{where}: {server_type}.{implementation} must be a mapping of settings, got {spec!r}"
        )
    extra = [key for key in value if key not in SERVER_TYPES]
    if extra:
        raise UserError(
            f"instance {name!r}{where}: unexpected key(s) {', '.join(map(repr, extra))} next to {server_type}",
            hint=f"settings belong inside {name}.{server_type}.{implementation}",
        )


def _near_miss(key: str, field: str) -> bool:
    """A typo is a close match of about the same length: `judge_model_server` is not `model_server`."""
    return abs(len(key) - len(field)) <= 2 and difflib.SequenceMatcher(None, key, field).ratio() >= 0.8


def _check_fields(instance: ServerInstance, where: str) -> None:
    path = f"{instance.name}.{instance.server_type}.{instance.implementation}"
    keys = [str(k) for k in instance.spec]
    # Server configs may hold any key, so a misspelling is only judged by the value's shape.
    for key, value in instance.spec.items():
        for field, expected_type in REFERENCE_FIELDS.items():
            if (key != field and field not in instance.spec and _near_miss(str(key), field)
                    and _is_reference(value) and value.get("type") == expected_type):
                raise UserError(f"{path}{where}: unknown key {key!r} (did you mean {field!r}?)")
        if key != "datasets" and "datasets" not in instance.spec and _near_miss(str(key), "datasets") \
                and isinstance(value, list) and all(isinstance(item, dict) for item in value):
            raise UserError(f"{path}{where}: unknown key {key!r} (did you mean 'datasets'?)")
    if instance.spec.get("entrypoint") in (None, ""):
        raise UserError(
            f"{path}{where}: missing 'entrypoint'{did_you_mean('entrypoint', keys)}",
            hint=f"add entrypoint: app.py (or ++{path}.entrypoint=app.py)",
        )
    if instance.server_type == RESOURCES_SERVERS:
        domain = instance.spec.get("domain")
        if domain is None:
            raise UserError(
                f"{path}{where}: a resources server needs a 'domain'{did_you_mean('domain', keys)}",
                hint=f"add domain: <one of {', '.join(DOMAINS)}> (or ++{path}.domain=other)",
            )
        if domain not in DOMAINS:
            raise UserError(
                f"{path}.domain{where}: unknown domain {domain!r}{did_you_mean(str(domain), DOMAINS)}",
                hint="domains: " + ", ".join(DOMAINS),
            )


def _is_reference(value: Any) -> bool:
    return isinstance(value, dict) and "type" in value and "name" in value and len(value) == 2


def _check_references(instance: ServerInstance, by_name: dict[str, ServerInstance], where: str) -> None:
    path = f"{instance.name}.{instance.server_type}.{instance.implementation}"
    for field, value in instance.spec.items():
        expected = REFERENCE_FIELDS.get(field)
        if expected is None and not (_is_reference(value) and value.get("type") in SERVER_TYPES):
            continue
        if value is None:  # an agent config may leave a reference unset, as NeMo Gym allows
            continue
        field_path = f"{path}.{field}"
        if not isinstance(value, dict) or "name" not in value:
            raise UserError(
                f"{field_path}{where}: expected a reference {{type: {expected}, name: <instance>}}, got {value!r}"
            )
        ref_type = value.get("type", expected)
        if ref_type not in SERVER_TYPES:
            raise UserError(f"{field_path}.type{where}: unknown server type {ref_type!r}"
                            f"{did_you_mean(str(ref_type), SERVER_TYPES)}")
        if expected is not None and ref_type != expected:
            raise UserError(f"{field_path}.type{where}: {field} must have type {expected}, got {ref_type!r}")
        target_name = value["name"]
        target = by_name.get(str(target_name))
        same_type = [i.name for i in by_name.values() if i.server_type == ref_type]
        if target is None:
            hint = did_you_mean(str(target_name), same_type) or (
                f"; defined {ref_type}: {', '.join(same_type)}" if same_type else f"; no {ref_type} instance is defined"
            )
            raise UserError(f"{field_path}.name{where}: no instance named {target_name!r}{hint}",
                            hint="reference an instance defined in one of the loaded configs")
        if target.server_type != ref_type:
            raise UserError(
                f"{field_path}.name{where}: {target_name!r} is a {target.server_type} instance, not {ref_type}"
                f"{did_you_mean(str(target_name), same_type)}"
            )


def _check_datasets(instance: ServerInstance, where: str) -> None:
    datasets = instance.spec.get("datasets")
    if datasets is None:
        return
    path = f"{instance.name}.{instance.server_type}.{instance.implementation}.datasets"
    if not isinstance(datasets, list):
        raise UserError(f"{path}{where}: must be a list of datasets, got {type(datasets).__name__}")
    for index, dataset in enumerate(datasets):
        item = f"{path}[{index}]"
        if not isinstance(dataset, dict):
            raise UserError(f"{item}{where}: a dataset is a mapping with name, type and jsonl_fpath")
        for required in ("name", "type", "jsonl_fpath"):
            if dataset.get(required) in (None, ""):
                raise UserError(f"{item}{where}: missing {required!r}{did_you_mean(required, map(str, dataset))}")
        if dataset["type"] not in DATASET_TYPES:
            raise UserError(
                f"{item}.type{where}: unknown dataset type {dataset['type']!r}"
                f"{did_you_mean(str(dataset['type']), DATASET_TYPES)}",
                hint="dataset types: " + ", ".join(DATASET_TYPES),
            )
        repeats = dataset.get("num_repeats", 1)
        if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
            raise UserError(f"{item}.num_repeats{where}: must be a whole number >= 1, got {repeats!r}")
