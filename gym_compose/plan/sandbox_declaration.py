"""A server's sandbox declaration: its `sandbox_config` block (NeMo Gym's key; gym-compose reads
its own keys there too) and its `sandbox_provider` reference, checked and turned into the policy
the broker enforces. Pure: no Docker, no files.

    python_sandbox:
      resources_servers:
        python_sandbox:
          sandbox_provider: sandbox            # optional; NeMo Gym's reference to a top-level block
          sandbox_config:
            image: my/image:tag                # or build: sandbox_image (a folder next to app.py);
                                               # default: gym-compose's
            cpus: 1                            # (NeMo Gym: resources: {cpu, memory_mib})
            memory: 512m
            pids: 256
            workdir: /work
            network: internal                  # none | internal | egress, or
                                               # {egress: {allow: [pypi.org, ...]}} (egress_allow.py),
                                               # with phases: {verify: [...]} for named phases
            ttl_s: 3600
            timeout_s: 60                      # default per-command timeout
            warm_pool: 4
            warm_spare_s: 600                  # a session's first lease of a task image starts its next
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pydantic import ValidationError

from gym_compose.config.instances import ServerInstance
from gym_compose.errors import UserError
from gym_compose.plan.egress_allow import allowed_hosts, phase_hosts
from gym_compose.plan.sandbox_names import declares_sandboxes
from gym_compose.sandbox.policy import ALLOWED_CAPABILITIES, NETWORK_POLICIES, SandboxPolicy, parse_size
from gym_compose.sandbox.provider_config import DEFAULT_METADATA_KEY

PROVIDER_NAME = "gym_compose"
POLICY_KEYS = ("cpus", "pids", "workdir", "read_only", "network", "ttl_s", "timeout_s", "ready_timeout_s",
               "warm_pool", "warm_spare_s", "max_output_bytes", "env", "user", "cap_add", "shell", "metadata",
               "allowed_images", "pull")
# fork_from_seed is the server's to act on (gym_compose/sandbox/seed_forks.py); the plan checks it
OWN_KEYS = frozenset({*POLICY_KEYS, "image", "build", "memory", "workdir_size", "task_images", "fork_from_seed"})
NEMO_KEYS = frozenset({"resources", "provider_options"})
BROKER_KEYS = frozenset({"max_live", "max_starting", "idle_timeout_s", "max_snapshots", "image_cache_gib",
                         "pull_stall_s"})
REFUSED_PROVIDER_OPTIONS = ("volumes", "run_args", "mounts", "privileged", "devices", "network", "network_mode")


@dataclass(frozen=True)
class SandboxDeclaration:
    instance: str
    policy: SandboxPolicy  # image "" until the build resolves it; network_name unset
    image: Optional[str] = None  # a named image, used as it is
    build: Optional[Path] = None  # a folder with a Dockerfile, relative to the implementation's folder
    notices: tuple[str, ...] = ()
    task_images: Optional["TaskImageFolder"] = None  # per-task images the plan builds (SWE task repositories)


@dataclass(frozen=True)
class TaskImageFolder:
    """`task_images: {folder: PATH, repository: NAME}`: one image per subfolder of PATH (a SWE task
    repository, docs/swe.md), which leases ask for as `NAME:<subfolder>`."""

    folder: Path
    repository: str


@dataclass(frozen=True)
class BrokerOptions:
    max_live: Optional[int] = None
    max_starting: Optional[int] = None
    idle_timeout_s: float = 3600.0
    max_snapshots: int = 64
    image_cache_gib: Optional[float] = None  # the budget of pulled task images (None: none, or derived at `up`)
    pull_stall_s: float = 120.0  # a pull with no progress for this long is given up
    notices: tuple[str, ...] = field(default_factory=tuple)
    # references to a top-level block the config lacks: the plan adds `{name: {gym_compose: {}}}`
    default_blocks: tuple[str, ...] = ()


def declaration_of(instance: ServerInstance, source_dir: Optional[Path],
                   roots: Sequence[Path] = ()) -> Optional[SandboxDeclaration]:
    spec = instance.spec
    if not declares_sandboxes(spec):
        return None
    where = f"{instance.name}.sandbox_config"
    block = spec.get("sandbox_config") or {}
    if not isinstance(block, dict):
        raise UserError(f"{where} must be a mapping, got {block!r}")
    from gym_compose.plan.sandbox_defaults import sandbox_defaults

    block = {**sandbox_defaults(instance.implementation, spec, instance.name), **block}
    notices: list[str] = []
    fields: dict[str, Any] = {key: block[key] for key in POLICY_KEYS if block.get(key) is not None}
    _take_resources(where, block, fields, notices)
    _check_provider_options(where, block.get("provider_options"), notices)
    if block.get("memory") is not None:
        fields["memory_bytes"] = _size(where, "memory", block["memory"])
    if block.get("workdir_size") is not None:
        fields["workdir_size_bytes"] = _size(where, "workdir_size", block["workdir_size"])
    if isinstance(fields.get("network"), dict):
        fields["egress_allow"] = allowed_hosts(f"{where}.network", fields["network"])
        fields["egress_phases"] = phase_hosts(f"{where}.network", fields["network"])
        fields["network"] = "allowlist"
    elif fields.get("network") is not None and fields["network"] not in NETWORK_POLICIES:
        raise UserError(f"{where}.network must be one of {', '.join(NETWORK_POLICIES)} or a mapping, "
                        f"got {fields['network']!r}",
                        hint="internal (the default) reaches only the server that leases it; none has no network; "
                        "egress also reaches the internet; {egress: {allow: [HOST, ...]}} reaches those hosts "
                        "through a proxy")
    caps = [str(cap).upper().removeprefix("CAP_") for cap in fields.get("cap_add") or []]
    refused = sorted(set(caps) - ALLOWED_CAPABILITIES)
    if refused:
        raise UserError(f"{where}.cap_add: {', '.join(refused)} may not be given to a sandbox",
                        hint=f"allowed: {', '.join(sorted(ALLOWED_CAPABILITIES))}")
    if caps:
        fields["cap_add"] = caps
    if isinstance(fields.get("allowed_images"), str):
        fields["allowed_images"] = [fields["allowed_images"]]
    for key in ("env", "metadata"):
        if key in fields:
            if not isinstance(fields[key], dict):
                raise UserError(f"{where}.{key} must be a mapping of NAME: value")
            fields[key] = {str(k): str(v) for k, v in fields[key].items()}
    if fields.get("user") is not None:
        fields["user"] = str(fields["user"])
    if fields.get("workdir") is not None:
        fields["workdir_declared"] = True
    _warn_unknown(where, block, notices)
    _check_fork_from_seed(where, block.get("fork_from_seed"))
    try:
        policy = SandboxPolicy(server=instance.name, image="", **fields)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                             for e in error.errors(include_url=False, include_input=False))
        raise UserError(f"{where} is invalid: {problems}") from None
    for key, minimum in (("cpus", 0.01), ("pids", 16), ("memory_bytes", 6 << 20), ("warm_pool", 0),
                         ("warm_spare_s", 0), ("ttl_s", 1), ("timeout_s", 0.001), ("max_output_bytes", 1)):
        if getattr(policy, key) < minimum:
            raise UserError(
                f"{where}: {key.replace('_bytes', '')} must be at least {minimum}, got {getattr(policy, key)}")
    image, build = block.get("image"), block.get("build")
    if image and build:
        raise UserError(f"{where}: give `image` or `build`, not both")
    build_dir = None
    if build:
        if source_dir is None:
            raise UserError(f"{where}.build: {instance.implementation} is a built-in implementation with no folder "
                            "to hold a sandbox image", hint="name an image with sandbox_config.image instead")
        build_dir = (source_dir / str(build)).resolve()
        if not build_dir.is_relative_to(source_dir.resolve()) or not build_dir.is_dir():
            raise UserError(f"{where}.build: {build!r} is not a folder inside {source_dir}")
    return SandboxDeclaration(instance=instance.name, policy=policy, image=str(image) if image else None,
                              build=build_dir, notices=tuple(notices),
                              task_images=_task_images(where, block.get("task_images"), roots))


def broker_options(data: dict[str, Any], instances: list[ServerInstance]) -> BrokerOptions:
    """The provider blocks the sandbox servers refer to: `gym_compose` settings, or a notice that
    another provider's block (docker, opensandbox, ...), or a block the config lacks, runs as
    gym-compose sandboxes."""
    options: dict[str, Any] = {}
    notices: list[str] = []
    default_blocks: list[str] = []
    for instance in instances:
        reference = instance.spec.get("sandbox_provider")
        if not reference:
            continue
        where = f"{instance.name}.sandbox_provider"
        if isinstance(reference, str):
            block = data.get(reference)
            if block is None:
                # NeMo Gym's own configs name `sandbox` and leave the provider to a file the user adds
                # (nemo_gym/sandbox/providers/<name>/configs/<name>.yaml); here the broker is that provider
                if reference not in default_blocks:
                    default_blocks.append(reference)
                    notices.append(f"notice: sandbox provider {reference!r} ({where}) has no top-level "
                                   f"`{reference}:` block in the config; it runs as gym-compose sandboxes (provider "
                                   f"{PROVIDER_NAME!r}: one broker for the project, with each server's sandbox_config)")
                continue
            if not isinstance(block, dict):
                raise UserError(f"{where} names {reference!r}, but the config's top-level `{reference}:` is not a "
                                f"provider block: {block!r}",
                                hint=f"make it one, e.g. `{reference}: {{gym_compose: {{}}}}`, or leave it out")
            label = f"top-level `{reference}:`"
        elif isinstance(reference, dict):
            block, label = reference, "inline sandbox_provider"
        else:
            raise UserError(f"{where} must be a name or a mapping, got {reference!r}")
        providers = [key for key in block if key != DEFAULT_METADATA_KEY]
        if len(providers) != 1:
            raise UserError(f"{where}: the {label} block must hold exactly one provider key, got {providers!r}")
        name, settings = providers[0], block[providers[0]] or {}
        if name != PROVIDER_NAME:
            notice = (f"notice: sandbox provider {name!r} ({label}) runs as gym-compose sandboxes: one broker for the "
                      "project, with each server's sandbox_config; its own settings are not used")
            if notice not in notices:
                notices.append(notice)
            continue
        if not isinstance(settings, dict):
            raise UserError(f"{where}: the {label} block's gym_compose settings must be a mapping")
        unknown = sorted(set(settings) - BROKER_KEYS)
        if unknown:
            raise UserError(f"{where}: unknown gym_compose sandbox setting(s) {', '.join(unknown)}",
                            hint=f"known: {', '.join(sorted(BROKER_KEYS))}")
        options.update(settings)
    for key in ("max_live", "max_starting", "max_snapshots"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UserError(f"sandbox setting {key} must be a whole number of 1 or more, got {value!r}")
    budget = options.get("image_cache_gib")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget <= 0):
        raise UserError(f"sandbox setting image_cache_gib must be a number of GiB above 0, got {budget!r}",
                        hint="the pulled task images kept on the engine at once (docs/swe.md#the-image-budget)")
    stall = options.get("pull_stall_s", 120.0)
    if isinstance(stall, bool) or not isinstance(stall, (int, float)) or stall < 5:
        raise UserError(f"sandbox setting pull_stall_s must be a number of seconds of 5 or more, got {stall!r}",
                        hint="how long a task image's pull may make no progress before it is given up "
                             "(docs/swe.md#when-a-pull-fails)")
    return BrokerOptions(max_live=options.get("max_live"), max_starting=options.get("max_starting"),
                         idle_timeout_s=float(options.get("idle_timeout_s", 3600.0)),
                         max_snapshots=options.get("max_snapshots") or 64,
                         image_cache_gib=float(budget) if budget is not None else None,
                         pull_stall_s=float(stall), notices=tuple(notices),
                         default_blocks=tuple(default_blocks))


def _check_fork_from_seed(where: str, value: Any) -> None:
    from gym_compose.sandbox.policy import MAX_FORKS

    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_FORKS + 1:
        raise UserError(f"{where}.fork_from_seed must be a whole number from 0 to {MAX_FORKS + 1} (the rollouts "
                        f"per task that share one set-up), got {value!r}",
                        hint="set it to the collection's num_repeats; 0 or 1 sets up every rollout's own sandbox")


def _task_images(where: str, block: Any, roots: Sequence[Path]) -> Optional[TaskImageFolder]:
    if block is None:
        return None
    from gym_compose.config import resolve_path

    if not isinstance(block, dict) or not block.get("folder") or not block.get("repository"):
        raise UserError(f"{where}.task_images must be a mapping with `folder` (one subfolder per task) and "
                        "`repository` (the name leases ask for: REPOSITORY:<subfolder>)", hint="see docs/swe.md")
    unknown = sorted(set(block) - {"folder", "repository"})
    if unknown:
        raise UserError(f"{where}.task_images: unknown key(s) {', '.join(unknown)}", hint="known: folder, repository")
    folder = resolve_path(str(block["folder"]), list(roots))
    if folder is None or not Path(folder).is_dir():
        raise UserError(f"{where}.task_images.folder {block['folder']!r} is not a folder "
                        f"(looked under {', '.join(str(r) for r in roots) or 'no search roots'})")
    return TaskImageFolder(folder=Path(folder), repository=str(block["repository"]))


def _take_resources(where: str, block: dict[str, Any], fields: dict[str, Any], notices: list[str]) -> None:
    resources = block.get("resources")
    if resources is None:
        return
    if not isinstance(resources, dict):
        raise UserError(f"{where}.resources must be a mapping (cpu, memory_mib, disk_gib, gpu, gpu_type)")
    if resources.get("cpu") is not None:
        if "cpus" in fields and float(fields["cpus"]) != float(resources["cpu"]):
            raise UserError(f"{where}: cpus and resources.cpu disagree; keep one")
        fields["cpus"] = resources["cpu"]
    if resources.get("memory_mib") is not None:
        if block.get("memory") is not None:
            raise UserError(f"{where}: memory and resources.memory_mib both given; keep one")
        fields["memory_bytes"] = _whole_number(f"{where}.resources.memory_mib", resources["memory_mib"], "MiB") << 20
    if resources.get("gpu"):
        raise UserError(f"{where}.resources.gpu: gym-compose sandboxes have no GPUs")
    if resources.get("disk_gib") is not None:
        notices.append(f"notice: {where}.resources.disk_gib is not enforced (Docker has no per-container disk "
                       "limit on this storage driver)")


def _whole_number(where: str, value: Any, unit: str) -> int:
    """A count of `unit` (NeMo Gym reads these with int() too, so `512MB` fails there as well)."""
    try:
        if isinstance(value, bool):
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise UserError(f"{where} must be a whole number of {unit}, got {value!r}",
                        hint=f"e.g. {where.rsplit('.', 1)[-1]}: 512 (or `memory: 512m` in sandbox_config)") from None


def _check_provider_options(where: str, options: Any, notices: list[str]) -> None:
    if not options:
        return
    if not isinstance(options, dict):
        raise UserError(f"{where}.provider_options must be a mapping")
    refused = sorted(key for key in options if key in REFUSED_PROVIDER_OPTIONS)
    if refused:
        raise UserError(f"{where}.provider_options: {', '.join(refused)} refused",
                        hint="gym-compose sandboxes never mount host folders, gain privileges or devices, or join "
                        "other networks; ship files with upload() or bake them into the image")
    notices.append(f"notice: {where}.provider_options ({', '.join(sorted(options))}) are not used by gym-compose")


def _warn_unknown(where: str, block: dict[str, Any], notices: list[str]) -> None:
    """Apps read their own keys from sandbox_config, so unknown keys stay; near-misses are flagged."""
    known = sorted(OWN_KEYS | NEMO_KEYS)
    for key in block:
        if key in OWN_KEYS or key in NEMO_KEYS:
            continue
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.8)
        if close:
            notices.append(f"warning: {where}.{key} is not a sandbox setting; did you mean {close[0]!r}?")


def _size(where: str, key: str, value: Any) -> int:
    try:
        return parse_size(value)
    except ValueError as error:
        raise UserError(f"{where}.{key}: {error}") from None
