"""Before a run whose sandboxes pull their images starts: does the engine have the room?

Disk: the images the broker will pull (their compressed size, from the registry: the preflight's
`ImagesToPull`) against the free space of the engine's data root; an image takes about twice its
compressed size once unpacked. Memory: each sandbox's memory limit times the sandboxes that run at
once (the broker's own rule, sandbox/broker/sandboxes.default_limits) against the engine's memory.
A run that cannot fit its images stops here, before anything starts; limits that only may not be
reached are warnings. Without a `image_cache_gib` sandbox setting, the image budget is derived here
from the free space (DERIVED_BUDGET_SHARE of it), so that a long run removes the pulled images it
is done with instead of filling the disk (docs/swe.md#the-image-budget).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Optional

from gym_compose.console import say
from gym_compose.errors import UserError

if TYPE_CHECKING:
    from gym_compose.plan.model import Stack
    from gym_compose.plan.sandbox_plan import SandboxPlan
    from gym_compose.stack.swe_preflight import ImagesToPull

UNPACKED_FACTOR = 2.0  # unpacked / compressed size: a rough rule for images of source trees and toolchains
GIB = 1 << 30
DERIVED_BUDGET_SHARE = 0.8
Room = Optional[tuple[int, int, Optional[int]]]  # (memory bytes, cores, free bytes of the data root)


def check_engine_room(stack: "Stack", to_pull: "ImagesToPull", room: Optional[Callable[[], Room]] = None) -> None:
    """Say what the run needs of the engine; raise UserError when its images cannot fit."""
    plan = stack.sandboxes
    pulling = [server for server in plan.servers if server.policy.pull] if plan is not None else []
    if plan is None or not pulling:
        return
    if room is None:
        from gym_compose.engine.engine_info import engine_room
        room = engine_room
    found = room()
    if found is None:
        return
    memory, cores, free = found
    if free is not None:
        check_disk(plan, to_pull, free)
    from gym_compose.sandbox.broker.sandboxes import default_limits
    from gym_compose.sandbox.policy import BrokerSettings

    settings = BrokerSettings(project=stack.project, servers={s.instance: s.policy for s in plan.servers},
                              max_live=plan.options.max_live, max_starting=plan.options.max_starting)
    at_once = default_limits(settings, cores, memory).max_live
    largest = max(pulling, key=lambda server: server.policy.memory_bytes).policy
    say(f"memory: up to {at_once} sandbox(es) at once, {largest.memory_bytes / GIB:.1f} GiB each at most; "
        f"the engine has {memory / GIB:.1f} GiB")
    if largest.memory_bytes > memory:
        say(f"warning: one sandbox may use {largest.memory_bytes / GIB:.1f} GiB, more than the engine's "
            f"{memory / GIB:.1f} GiB; a task that needs it all is OOM-killed (sandbox_config.resources.memory_mib "
            "sets the limit)")
    elif at_once * largest.memory_bytes > memory:
        say(f"warning: {at_once} sandboxes of {largest.memory_bytes / GIB:.1f} GiB may need "
            f"{at_once * largest.memory_bytes / GIB:.1f} GiB, more than the engine's {memory / GIB:.1f} GiB "
            "(the gym_compose sandbox setting max_live runs fewer at once: docs/sandboxes.md)")


def check_disk(plan: "SandboxPlan", to_pull: "ImagesToPull", free: int) -> None:
    """The image budget (set, or derived from `free`) against the images this run pulls."""
    budget_gib = plan.options.image_cache_gib
    setting = "the sandbox setting image_cache_gib"
    if budget_gib is None:
        budget_gib = round(free * DERIVED_BUDGET_SHARE / GIB, 1)
        plan.options = replace(plan.options, image_cache_gib=budget_gib)
        setting = f"{DERIVED_BUDGET_SHARE:.0%} of the free space; {setting} sets it"
    budget = budget_gib * GIB
    if budget > free:
        raise UserError(f"the image budget (image_cache_gib {budget_gib:g} GiB, {budget / 1e9:.1f} GB) is more than "
                        f"the {free / 1e9:.1f} GB free in the engine's data root",
                        hint="nothing was started. Lower image_cache_gib, or free space")
    if not to_pull.count:
        return
    need = to_pull.pull_bytes
    unsized = (f" for the {to_pull.count - to_pull.unsized} whose size was asked (Docker Hub's are not: it counts "
               "manifest reads as pulls)") if to_pull.unsized else ""
    say(f"disk: {to_pull.count} image(s) to pull, {need / 1e9:.2f} GB compressed{unsized} (about "
        f"{need * UNPACKED_FACTOR / 1e9:.1f} GB unpacked); the engine's data root has {free / 1e9:.1f} GB free; "
        f"image budget {budget_gib:g} GiB = {budget / 1e9:.1f} GB ({setting})")
    image, largest = max(((i, size) for i, size in to_pull.sizes.items() if size is not None),
                         key=lambda item: item[1], default=(None, 0))
    if image is not None and largest * UNPACKED_FACTOR > budget:
        raise UserError(f"task image {image} is about {largest * UNPACKED_FACTOR / 1e9:.1f} GB unpacked "
                        f"({largest / 1e9:.1f} GB compressed), more than the image budget of {budget / 1e9:.1f} GB",
                        hint="nothing was started. Free space (docker image prune removes unused images), raise "
                        "image_cache_gib, or move the engine's data-root to a larger disk")
    if need * UNPACKED_FACTOR > budget:
        say("image budget: the pulled images will not all fit; each is removed once no sandbox uses it and the budget "
            "needs the room (least recently used first), and pulled again if a later row asks for it")
