"""Live sandboxes, from lease to removal: leases, warm pools, starts and pulls, death, reaping.

A lease takes a ready sandbox from its server's warm pool when the request asks for the declared
image, else starts one (cold). With `warm_spare_s`, a session's (`metadata.session`) first cold
lease of another image (a SWE task's) starts one spare of that image for the session's next lease
of it (the task's verification sandbox), given up when the session has not taken it within
`warm_spare_s` or when a lease needs its slot.
A released sandbox is destroyed, never handed to anyone again.
Who may start and who waits is `admission.Admission` (the `max_live` slots, evicting idle warm
sandboxes for waiting leases, the `max_starting` throttle); commands and files go through
`sandbox_io.SandboxIO`; the platform is a `backend.SandboxBackend`. A sandbox whose agent stream
ends is dead: its reason (OOM-killed, exited, time-to-live) is kept so that later calls get it
instead of a bare "not found".
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import secrets
import time
from collections import OrderedDict, deque
from typing import Any, Optional

from gym_compose.contract import BROKER_PULLED_LINE
from gym_compose.contract import EGRESS_DEFAULT_PHASE as DEFAULT_PHASE
from gym_compose.net.incarnation import Incarnations
from gym_compose.sandbox.broker.admission import Admission
from gym_compose.sandbox.broker.backend import SandboxBackend
from gym_compose.sandbox.broker.broker_errors import (
    BackendError,
    BrokerError,
    Conflict,
    NoCapacity,
    NotFound,
    Refused,
    SandboxGone,
    StartFailed,
    UnknownSandbox,
)
from gym_compose.sandbox.broker.channel import AgentChannel, ChannelClosed, FallbackChannel, NoAgent
from gym_compose.sandbox.broker.checkpoints import Checkpoints
from gym_compose.sandbox.broker.death import death_reason
from gym_compose.sandbox.broker.image_cache import ImageCache
from gym_compose.sandbox.broker.launch import closed_ports_helper, container_config, container_name
from gym_compose.sandbox.broker.ledger import sandbox_cost
from gym_compose.sandbox.broker.sandbox_io import SandboxIO
from gym_compose.sandbox.broker.sandboxes import Limits, Sandbox, default_limits
from gym_compose.sandbox.broker.snapshots import Snapshot, Snapshots
from gym_compose.sandbox.policy import (
    PROJECT_LABEL,
    SANDBOX_LABEL,
    BrokerSettings,
    ExecRequest,
    LeaseRequest,
    SandboxPolicy,
    refusal,
)

LOG = logging.getLogger("gym_compose.sandbox.broker")
SpareKey = tuple[str, str, str]  # server, image, session
REAP_INTERVAL_S = 5.0
FALLBACK_POLL_S = 2.0
TOMBSTONES = 10000
LAUNCH_DRAIN_S = 60.0
STATS_WINDOW = 1000


class SandboxPool:
    def __init__(self, backend: SandboxBackend, settings: BrokerSettings):
        self.backend, self.settings = backend, settings
        self.admission = Admission()
        self.io = SandboxIO(self._mark_dead)
        self.node_cpus = 0.0
        self.sandboxes: dict[str, Sandbox] = {}
        self.warm: dict[str, deque[Sandbox]] = {server: deque() for server in settings.servers}
        self.tombstones: OrderedDict[str, str] = OrderedDict()
        self.peak_leased = 0
        self.started_total = 0
        self.leases = {"warm": 0, "cold": 0}
        self.start_times: deque[float] = deque(maxlen=STATS_WINDOW)
        self._tasks: set[asyncio.Task] = set()
        self._launches: set[asyncio.Task] = set()
        self._refilling: set[str] = set()
        self.spares: dict[SpareKey, Sandbox] = {}  # ready spares of task images
        self._sparing: set[SpareKey] = set()  # spares being started
        self._spared: OrderedDict[SpareKey, None] = OrderedDict()  # sessions and images given a spare once
        self.ready = False
        self.closing = False
        self._pulls: dict[str, asyncio.Task] = {}
        self._present: set[str] = set()  # images known to be on the engine (pulled or found)
        self.pulled: list[dict[str, Any]] = []
        self.snapshots = Snapshots(backend, settings.project, settings.max_snapshots)
        self.checkpoints = Checkpoints(self.snapshots)
        self.callers = Incarnations()
        self.image_cache = ImageCache(settings.image_cache_bytes)
        self._removals: dict[str, asyncio.Task] = {}  # pulled images being removed for the budget
        self._image_workdirs: dict[str, Optional[str]] = {}

    @property
    def live(self) -> int:
        return self.admission.live

    @property
    def limits(self) -> Limits:
        return self.admission.limits

    # -- life cycle ------------------------------------------------------------------------------

    async def open(self) -> None:
        info = await self.backend.info()
        self.node_cpus = float(info.get("NCPU") or 1)
        self.admission.set_limits(default_limits(self.settings, int(info.get("NCPU") or 1),
                                                 int(info.get("MemTotal") or 0)))
        removed = await self.remove_leftovers()
        if removed:
            LOG.warning("removed %d sandboxes left by an earlier broker of project %s", removed, self.settings.project)
        snapshots = await self.snapshots.remove_all()
        if snapshots:
            LOG.warning("removed %d snapshots left by an earlier broker of project %s", snapshots,
                        self.settings.project)
        for server, policy in self.settings.servers.items():
            if (policy.network != "none" and policy.network_name
                    and not await self.backend.network_exists(policy.network_name)):
                LOG.error("network %s for %s's sandboxes does not exist", policy.network_name, server)
        LOG.info("sandbox broker of %s ready: max_live %d, max_starting %d, servers %s", self.settings.project,
                 self.limits.max_live, self.limits.max_starting, ", ".join(self.settings.servers) or "-")
        self.ready = True
        self._spawn(self._reap_forever())
        for server in self.settings.servers:
            self._schedule_refill(server)

    async def remove_leftovers(self) -> int:
        found = await self.backend.containers([f"{PROJECT_LABEL}={self.settings.project}", SANDBOX_LABEL])
        await asyncio.gather(*(self.backend.remove(c["Id"]) for c in found), return_exceptions=True)
        return len(found)

    async def close(self) -> None:
        """Destroy every sandbox (SIGTERM of the broker, the end of the stack)."""
        self.closing = True
        if self._launches:  # let starts in flight end first (see _start)
            await asyncio.wait(list(self._launches), timeout=LAUNCH_DRAIN_S)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*(self.destroy(s, "broker stopped") for s in list(self.sandboxes.values())),
                             return_exceptions=True)
        await self.remove_leftovers()
        await self.snapshots.remove_all()  # after the sandboxes: an image a container uses is not removed

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- leases ----------------------------------------------------------------------------------

    async def lease(self, server: str, request: LeaseRequest) -> tuple[Sandbox, bool]:
        """A sandbox for `server` (and whether it came warm from the pool)."""
        policy = self._policy(server)
        snapshot = self._snapshot_for(server, request)
        image = request.image or (snapshot.base_image if snapshot else policy.image)
        reason = refusal(policy, request, image) or policy.phase_refusal(request.phase)
        if reason:
            raise Refused(reason)
        phase = request.phase or DEFAULT_PHASE  # warm sandboxes wait in the default one
        image = snapshot.image if snapshot else policy.resolve_image(image)
        as_declared = (snapshot is None and request.cpu is None and request.memory_mib is None
                       and (phase == DEFAULT_PHASE or self.backend.moves_phases))
        wants_warm = as_declared and image == policy.image
        session = request.metadata.get("session")
        # a session's task image: its spare (or, on a cold lease, one for its next lease of it)
        spare_key = ((server, image, session) if as_declared and session and image != policy.image
                     and policy.warm_spare_s > 0 else None)
        cpus = request.cpu if request.cpu is not None else snapshot.cpus if snapshot else None
        memory_bytes = (request.memory_mib << 20 if request.memory_mib is not None
                        else snapshot.memory_bytes if snapshot else None)
        timeout = min(request.ready_timeout_s or policy.ready_timeout_s, policy.ready_timeout_s)
        asked = time.monotonic()
        deadline = asked + timeout
        sandbox = None
        if spare_key is not None:
            while spare_key in self._sparing:  # started before this lease: sooner than a new one
                await self.admission.wait_for_change(deadline)
            sandbox = self._take_spare(spare_key)
        if sandbox is None:
            sandbox = await self._warm_or_slot(server, wants_warm, deadline)
        warm = sandbox is not None
        if sandbox is None:
            sandbox = await self._start(policy, image, deadline, cpus=cpus, memory_bytes=memory_bytes, phase=phase)
        elif phase != sandbox.phase:  # a warm one, started in the default phase
            await self.move_to_phase(sandbox, phase)
        sandbox.state = "leased"
        sandbox.cpus, sandbox.memory_bytes = cpus, memory_bytes
        sandbox.forked_from = snapshot.id if snapshot else None
        sandbox.env = {**policy.env, **(snapshot.env if snapshot else {}), **request.env}
        sandbox.metadata = {**policy.metadata, **request.metadata}
        sandbox.ttl_s = min(request.ttl_s or policy.ttl_s, policy.ttl_s)
        sandbox.last_used = sandbox.leased_at = time.monotonic()
        sandbox.lease_wait_s = sandbox.leased_at - asked
        if warm:  # its image was pulled before this rollout asked
            sandbox.pull_wait_s = 0.0
        if request.workdir:
            sandbox.workdir = request.workdir
        elif snapshot is not None:
            sandbox.workdir = snapshot.workdir
        else:
            sandbox.workdir = await self._default_workdir(policy, sandbox.image)
        if request.workdir and request.workdir != policy.workdir:
            made = await self.exec(sandbox, ExecRequest(command=f"mkdir -p -- '{request.workdir}'", cwd="/"))
            if made["return_code"] != 0:
                await self.destroy(sandbox, "work folder could not be made")
                raise StartFailed(f"cannot make the work folder {request.workdir}: {made['stderr'].strip()}")
        self.image_cache.used(sandbox.image)
        self.peak_leased = max(self.peak_leased, sum(1 for s in self.sandboxes.values() if s.state == "leased"))
        self.leases["warm" if warm else "cold"] += 1
        self._schedule_refill(server)
        if spare_key is not None and not warm:
            self._schedule_spare(policy, spare_key)
        return sandbox, warm

    async def _default_workdir(self, policy: SandboxPolicy, image: str) -> str:
        """Where a lease that names no workdir works: the one sandbox_config names, else its image's
        WORKDIR as `docker run` and NeMo Gym's providers use it (a task image's repository), else the
        policy's /work. A read-only sandbox stays in its writable work folder."""
        if policy.workdir_declared or policy.read_only:
            return policy.workdir
        if image not in self._image_workdirs:
            self._image_workdirs[image] = await self.backend.image_workdir(image)
        return self._image_workdirs[image] or policy.workdir

    async def _warm_or_slot(self, server: str, wants_warm: bool, deadline: float) -> Optional[Sandbox]:
        """A sandbox from the server's warm pool, or None once a max_live slot is reserved for a start."""
        self.admission.waiting += 1
        try:
            while True:
                if wants_warm:
                    sandbox = self._take_warm(server)
                    if sandbox is not None:
                        return sandbox
                if self._reserve_now():
                    return None
                self._evict_for_waiters(keep=server if wants_warm else None)
                await self.admission.wait_for_change(deadline)
        finally:
            self.admission.waiting -= 1

    def caller_seen(self, caller: Optional[str]) -> None:
        """A request from `caller`: if it is a later start of a server's container, the sandboxes its
        earlier start held are given back (in the background): nobody is left to release them."""
        earlier = self.callers.observe(caller)
        if earlier is not None:
            orphans = [s for s in self.sandboxes.values() if s.caller == earlier and s.state in ("leased", "paused")]
            if orphans:
                self._spawn(self._release_orphans(orphans, earlier))

    def leased_for(self, sandboxes: builtins.list[Sandbox], caller: Optional[str]) -> None:
        """Who the sandboxes were leased for. A lease of a start that has been replaced since it asked (a
        request still being served when its server died) is given back at once."""
        for sandbox in sandboxes:
            sandbox.caller = caller
        if caller is not None and self.callers.replaced(caller):
            self._spawn(self._release_orphans(sandboxes, caller))

    async def _release_orphans(self, orphans: builtins.list[Sandbox], earlier: str) -> None:
        reason = f"the server container that leased it restarted ({earlier} is gone)"
        LOG.warning("giving back %d sandboxes leased by %s, which has restarted since", len(orphans), earlier)
        for sandbox in orphans:
            self._bury(sandbox.id, reason)
        await asyncio.gather(*(self.destroy(sandbox, reason) for sandbox in orphans), return_exceptions=True)

    def _snapshot_for(self, server: str, request: LeaseRequest) -> Optional[Snapshot]:
        if request.snapshot is None:
            return None
        if request.image:
            raise Refused("a lease names an image or a snapshot to start from, not both")
        return self.snapshots.get(server, request.snapshot)

    def get(self, server: Optional[str], sandbox_id: str) -> Sandbox:
        sandbox = self.sandboxes.get(sandbox_id)
        if sandbox is not None and server is not None and sandbox.server != server:
            raise Refused(f"sandbox {sandbox_id} belongs to {sandbox.server}, not {server}")
        if sandbox_id in self.tombstones:  # dead, released or reaped, maybe still being removed
            raise SandboxGone(self.tombstones[sandbox_id])
        if sandbox is not None and sandbox.state == "restoring":
            raise Conflict(f"sandbox {sandbox_id} is being restored from a snapshot; call again when that returns")
        if sandbox is None or sandbox.state not in ("leased", "paused"):
            raise UnknownSandbox(f"no sandbox {sandbox_id!r} (released, or never leased)")
        return sandbox

    async def relaunch(self, sandbox: Sandbox, image: str) -> None:
        """Replace a leased sandbox's container by a new one of `image` (a restore): the same id,
        lease, grant, limits, env and time-to-live; its processes end. A failed start buries it."""
        sandbox.state = "restoring"
        old, sandbox.channel = sandbox.channel, None  # its watcher lets the old container go (_watch)
        try:
            if old is not None:
                await old.aclose()
            if sandbox.container_id:
                await self.backend.remove(sandbox.container_id)
        except BackendError as error:
            await self.destroy(sandbox, f"could not be restored: {error}")
            raise
        sandbox.container_id, sandbox.image = "", image
        if self.snapshots.retired:  # the old container may have run from a deleted snapshot's image
            await self.snapshots.prune()
        started = sandbox.started
        await self._launch(sandbox, time.monotonic() + sandbox.policy.ready_timeout_s, sandbox.cpus,
                           sandbox.memory_bytes)
        sandbox.started = started
        sandbox.state = "leased"

    async def release(self, sandbox: Sandbox) -> dict[str, Any]:
        """Destroy it; returns what it cost (ledger.py), read just before."""
        cost = await sandbox_cost(self.backend, sandbox)
        await self.destroy(sandbox, "released")
        return cost

    def list(self, server: Optional[str] = None) -> list[dict[str, Any]]:
        return [s.describe() for s in self.sandboxes.values() if server is None or s.server == server]

    def stats(self) -> dict[str, Any]:
        states = [s.state for s in self.sandboxes.values()]
        starts = sorted(self.start_times)
        return {"live": self.live, "leased": states.count("leased"), "warm": states.count("warm"),
                "starting": states.count("starting"), "spares": len(self.spares), "peak_leased": self.peak_leased,
                "started_total": self.started_total, "leases_warm": self.leases["warm"],
                "leases_cold": self.leases["cold"], "start_s_p50": _quantile(starts, 0.5),
                "start_s_p95": _quantile(starts, 0.95), "max_live": self.limits.max_live,
                "max_starting": self.limits.max_starting, "pulled": list(self.pulled[-20:]),
                "pulling": sorted(self._pulls), "image_budget_bytes": self.image_cache.budget_bytes,
                "pulled_images_bytes": self.image_cache.total_bytes, "images_evicted": len(self.image_cache.evicted),
                "evicted": list(self.image_cache.evicted[-20:])}

    def _policy(self, server: str) -> SandboxPolicy:
        policy = self.settings.servers.get(server)
        if policy is None:
            raise Refused(f"{server} declared no sandboxes in the plan")
        return policy

    def _take_spare(self, key: SpareKey) -> Optional[Sandbox]:
        sandbox = self.spares.pop(key, None)
        if sandbox is not None and sandbox.state == "warm" and not sandbox.channel.closed.is_set():
            sandbox.spare_for = None
            return sandbox
        return None

    def _take_warm(self, server: str) -> Optional[Sandbox]:
        pool = self.warm.get(server)
        while pool:
            sandbox = pool.popleft()
            if sandbox.state == "warm" and not sandbox.channel.closed.is_set():
                return sandbox
        return None

    # -- starting --------------------------------------------------------------------------------

    def _reserve_now(self) -> bool:
        """Take one of the max_live slots if one is free (no await: nothing can slip in between)."""
        return not self.closing and self.admission.reserve_now()

    def _evict_for_waiters(self, keep: Optional[str]) -> None:
        """Leases wait for slots held by idle warm sandboxes (of other servers, or any when the waiter
        cannot use them): destroy one such sandbox per waiting lease."""
        while self.admission.evicting < self.admission.waiting:
            if self.spares:  # a spare only may be used: it goes first, whoever waits
                victim = self.spares.pop(next(iter(self.spares)))
            else:
                candidates = [pool[0] for server, pool in self.warm.items() if pool and server != keep]
                if not candidates:
                    return
                victim = min(candidates, key=lambda s: s.started)
                self.warm[victim.server].popleft()
            self.admission.evicting += 1
            self._spawn(self._evict(victim))

    async def _evict(self, sandbox: Sandbox) -> None:
        try:
            await self.destroy(sandbox, "evicted from the warm pool")
        finally:
            self.admission.evicting -= 1

    async def _start(self, policy: SandboxPolicy, image: str, deadline: float, cpus: Optional[float] = None,
                     memory_bytes: Optional[int] = None, phase: str = DEFAULT_PHASE) -> Sandbox:
        """Start a sandbox in a slot the caller reserved (given back if the start fails).

        The start runs to its end even when the caller gives up: an engine call abandoned halfway
        (a container removed while it starts) can leave the engine's network bookkeeping behind.
        A sandbox whose caller went away is destroyed once it has started."""
        name = container_name(self.settings.project, policy.server, secrets.token_hex(4))
        sandbox = Sandbox(id=name, server=policy.server, image=image, policy=policy, workdir=policy.workdir,
                          phase=phase)
        self.sandboxes[name] = sandbox
        launch = asyncio.get_running_loop().create_task(self._launch(sandbox, deadline, cpus, memory_bytes))
        self._launches.add(launch)
        launch.add_done_callback(self._launches.discard)
        try:
            return await asyncio.shield(launch)
        except asyncio.CancelledError:
            launch.add_done_callback(lambda task: task.cancelled() or task.exception() is not None
                                     or self._spawn(self.destroy(sandbox, "given up by its caller")))
            raise

    async def _launch(self, sandbox: Sandbox, deadline: float, cpus: Optional[float],
                      memory_bytes: Optional[int]) -> Sandbox:
        policy, image, name = sandbox.policy, sandbox.image, sandbox.id
        began = time.monotonic()
        try:
            if policy.pull:
                await self._pulled(image, deadline)
                sandbox.pull_wait_s = time.monotonic() - began
            await self.admission.start_slot(deadline)
            began = time.monotonic()  # a start's time is the engine's and the agent's, not the throttle's queue
            try:
                sandbox.started_phase = sandbox.phase  # a start (a restore's too) is in the phase it is in
                config = container_config(self.settings.project, policy, image, self.node_cpus, memory_bytes, cpus,
                                          sandbox.phase)
                sandbox.container_id = await self.backend.create(config, name)
                if policy.network == "allowlist" and policy.network_name \
                        and policy.phase_network(sandbox.phase) is None:
                    # a phase that names no host: off its network before anything in it runs
                    await self.backend.detach(sandbox.container_id, policy.network_name)
                reader, writer = await self.backend.attach(sandbox.container_id)
                channel = AgentChannel(reader, writer, name)
                sandbox.channel = channel
                await self.backend.start(sandbox.container_id)
                if policy.network == "egress" and self.settings.closed_node_ports:
                    await self._close_node_ports(sandbox)
            finally:
                self.admission.end_start()
            try:
                hello = await channel.wait_ready(max(1.0, deadline - time.monotonic()))
                sandbox.uid = hello.get("uid")
            except NoAgent:
                LOG.warning("image %s has no python3: sandbox %s runs commands by Engine API exec", image, name)
                await channel.aclose()
                sandbox.channel = FallbackChannel(self.backend, sandbox.container_id, name)
        except NotFound as error:
            await self.destroy(sandbox, "could not start")
            raise StartFailed(f"cannot start a sandbox of image {image!r}: {error}; build it first "
                              "(gym-compose build builds the images a config declares)") from None
        except (BackendError, ChannelClosed, asyncio.TimeoutError) as error:
            detail = str(error) or type(error).__name__
            tail = list(sandbox.channel.stderr_tail) if sandbox.channel is not None else []
            await self.destroy(sandbox, "could not start")
            raise StartFailed(f"sandbox of image {image!r} did not start: {detail}"
                              + (f"; agent said: {tail[-1]}" if tail else "")) from None
        except BaseException:
            await self.destroy(sandbox, "could not start")
            raise
        sandbox.start_s = time.monotonic() - began
        sandbox.started = sandbox.last_used = time.monotonic()
        self.started_total += 1
        self.start_times.append(sandbox.start_s)
        self._spawn(self._watch(sandbox))
        return sandbox

    async def _close_node_ports(self, sandbox: Sandbox) -> None:
        """Refuse the node's published ports from inside an egress sandbox before it is leased."""
        assert sandbox.container_id is not None and self.settings.netns_image
        config = closed_ports_helper(self.settings.project, sandbox.server, sandbox.container_id,
                                     self.settings.netns_image, self.settings.closed_node_ports)
        code, output = await self.backend.run_to_end(config, f"{sandbox.id}-netns")
        if code != 0:
            raise BackendError(f"could not close the node's published ports in it (nft, exit {code}): "
                              f"{output.strip()[-300:]}")

    async def _pulled(self, image: str, deadline: float) -> None:
        """Pull an image the engine lacks, once however many leases ask for it at the same time. A
        pull runs on when its lease gives up (the next lease finds the image); it holds the lease's
        live slot, so the sandbox cap bounds the pulls too."""
        removal = self._removals.get(image)
        if removal is not None:  # the budget is removing it: pull it again once that is done
            await asyncio.shield(removal)
        if image in self._present or await self.backend.image_exists(image):
            self._present.add(image)
            return
        pull = self._pulls.get(image)
        if pull is None:
            pull = asyncio.get_running_loop().create_task(self._pull(image))
            self._pulls[image] = pull
            pull.add_done_callback(lambda _: self._pulls.pop(image, None))
        try:
            await asyncio.wait_for(asyncio.shield(pull), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            raise NoCapacity(f"image {image} is still being pulled after the lease's ready timeout; the pull "
                             "goes on, later leases will find it (raise sandbox_config ready_timeout_s)") from None
        except BackendError as error:
            raise StartFailed(f"cannot pull image {image!r}: {error}") from None

    async def _pull(self, image: str) -> None:
        began = time.monotonic()
        LOG.info("pulling %s (not on the engine yet)", image)
        await self.backend.pull(image, lambda line: LOG.info("%s", line))
        self.pulled.append({"image": image, "seconds": round(time.monotonic() - began, 1)})
        self._present.add(image)
        LOG.info("%s", BROKER_PULLED_LINE.format(image=image, seconds=time.monotonic() - began))
        if self.image_cache.budget_bytes is not None:
            try:
                self.image_cache.pulled(image, await self.backend.image_size(image))
            except BackendError as error:
                LOG.warning("cannot size the pulled image %s (%s); it is not counted against the budget", image, error)
            self._trim_images()

    def _trim_images(self) -> None:
        """Start removing the least recently used pulled images that no sandbox uses, until the rest fit the
        budget. The choice and its registration happen in one step of the loop, so a lease that asks
        for an image from then on waits for its removal (and pulls it again)."""
        in_use = {sandbox.image for sandbox in self.sandboxes.values()} | set(self._pulls)
        for image in self.image_cache.over_budget(in_use):
            if image not in self._removals:
                self._present.discard(image)
                self._removals[image] = self._spawn(self._remove_pulled(image))

    async def _remove_pulled(self, image: str) -> None:
        began = time.monotonic()
        try:
            removed = await self.backend.remove_unused_image(image)
        except BackendError as error:
            LOG.warning("could not remove the pulled image %s for the image budget: %s", image, error)
            return
        finally:
            self._removals.pop(image, None)
        if removed:
            self.image_cache.removed(image, time.monotonic() - began)
            LOG.info("removed the pulled image %s for the image budget (%.2f GB of pulled images held, budget %.2f GB)",
                     image, self.image_cache.total_bytes / 1e9, (self.image_cache.budget_bytes or 0) / 1e9)
        else:  # another project's container: kept, and tried last next time
            self.image_cache.used(image)
            LOG.info("the pulled image %s is in use by a container; kept for now", image)

    def _schedule_refill(self, server: str) -> None:
        policy = self.settings.servers.get(server)
        if policy is None or policy.warm_pool <= 0 or server in self._refilling or self.closing:
            return
        self._refilling.add(server)
        self._spawn(self._refill(server))

    def _schedule_spare(self, policy: SandboxPolicy, key: SpareKey) -> None:
        """Start a spare of the key's image for its session in a slot taken now, before the session's
        next lease can ask for it (a lease that finds it starting waits for it). Only a session's first
        cold lease of an image gets one: its later ones (a verification after the agent's, retries)
        would leave theirs untaken. Leases come first: a spare takes a slot only when no lease waits
        for one."""
        if key in self._spared or self.closing:
            return
        if self.admission.waiting or not self._reserve_now():
            return
        self._spared[key] = None
        while len(self._spared) > TOMBSTONES:
            self._spared.popitem(last=False)
        self._sparing.add(key)
        self._spawn(self._start_spare(policy, key))

    async def _start_spare(self, policy: SandboxPolicy, key: SpareKey) -> None:
        _, image, session = key
        try:
            sandbox = await self._start(policy, image, time.monotonic() + policy.ready_timeout_s)
            sandbox.state, sandbox.spare_for = "warm", session
            self.spares[key] = sandbox
        except BrokerError as error:
            LOG.warning("spare sandbox of %s for %s: %s", image, policy.server, error)
        finally:
            self._sparing.discard(key)
            await self.admission.changed()  # a lease waiting for this spare looks again

    async def _refill(self, server: str) -> None:
        """Start sandboxes until the server's warm pool is full, several at once (a pool emptied by a
        burst refills at the engine's pace, not one start after another), leaving one of the
        `max_starting` start slots to leases."""
        policy = self.settings.servers[server]
        at_once = max(1, self.limits.max_starting - 1)
        starting: set[asyncio.Task] = set()
        try:
            while not self.closing:
                while (len(self.warm[server]) + len(starting) < policy.warm_pool
                       and len(starting) < at_once):
                    # Leases come first: a refill takes a slot only when no lease waits for one.
                    if self.admission.waiting or not self._reserve_now():
                        break  # a release or the reaper schedules the next refill
                    starting.add(asyncio.ensure_future(
                        self._start(policy, policy.image, time.monotonic() + policy.ready_timeout_s)))
                if not starting:
                    return
                done, starting = await asyncio.wait(starting, return_when=asyncio.FIRST_COMPLETED)
                failed = False
                for task in done:
                    try:
                        sandbox = task.result()
                    except BrokerError as error:
                        LOG.error("warm pool of %s: %s", server, error)
                        failed = True
                        continue
                    sandbox.state = "warm"
                    self.warm[server].append(sandbox)
                await self.admission.changed()
                if failed:
                    await asyncio.sleep(REAP_INTERVAL_S)
        finally:
            for task in starting:  # the broker closing: a start given up destroys its sandbox (_start)
                task.cancel()
            self._refilling.discard(server)

    # -- commands and files ----------------------------------------------------------------------

    async def move_to_phase(self, sandbox: Sandbox, phase: str) -> float:
        """Move a sandbox to another egress phase: off its phase's network, onto the new one's (none
        for a phase that names no host); what runs in it keeps running, under the new phase's reach.
        Seconds it took. A move that fails halfway destroys the sandbox: it is never left between
        phases, nor in the old one while its server believes it moved."""
        policy = sandbox.policy
        began = time.monotonic()
        async with sandbox.phase_lock:
            if phase == sandbox.phase:
                return 0.0
            try:
                await self.backend.move_to_phase(sandbox.container_id, policy.phase_network(sandbox.phase),
                                                 policy.phase_network(phase), phase)
            except BackendError as error:
                self._bury(sandbox.id, f"could not be moved to egress phase {phase!r}: {error}")
                await self.destroy(sandbox, f"could not be moved to egress phase {phase!r}")
                raise
            sandbox.phase = phase
        return time.monotonic() - began

    async def exec(self, sandbox: Sandbox, request: ExecRequest) -> dict[str, Any]:
        _not_paused(sandbox)
        sandbox.commands += 1
        return await self.io.exec(sandbox, request)

    async def write_file(self, sandbox: Sandbox, path: str, data: bytes, mode: Optional[int], chunk: int) -> int:
        _not_paused(sandbox)
        return await self.io.write_file(sandbox, path, data, mode, chunk)

    async def read_file(self, sandbox: Sandbox, path: str, chunk: int, limit: int) -> bytes:
        _not_paused(sandbox)
        return await self.io.read_file(sandbox, path, chunk, limit)

    # -- death, reaping, removal -----------------------------------------------------------------

    async def _watch(self, sandbox: Sandbox) -> None:
        channel = sandbox.channel
        if isinstance(channel, FallbackChannel):
            while sandbox.state != "removing" and sandbox.channel is channel:
                await asyncio.sleep(FALLBACK_POLL_S)
                try:
                    running = (await self.backend.inspect(sandbox.container_id))["State"].get("Running")
                except NotFound:
                    running = False
                if not running:
                    channel.closed.set()
                    break
        await channel.closed.wait()
        if sandbox.state != "removing" and sandbox.channel is channel:  # not replaced by a restore
            await self._mark_dead(sandbox)

    async def _mark_dead(self, sandbox: Sandbox, reason: Optional[str] = None) -> str:
        """Bury a dead sandbox once (its watcher and a caller may notice at the same moment)."""
        if sandbox.id in self.tombstones:
            return self.tombstones[sandbox.id]
        if sandbox.dying is None:
            sandbox.dying = asyncio.get_running_loop().create_task(self._bury_dead(sandbox, reason))
        return await asyncio.shield(sandbox.dying)

    async def _bury_dead(self, sandbox: Sandbox, reason: Optional[str]) -> str:
        reason = reason or await death_reason(self.backend, sandbox)
        self._bury(sandbox.id, reason)
        LOG.warning("sandbox %s of %s is dead: %s", sandbox.id, sandbox.server, reason)
        self._forget_warm(sandbox)
        self._spawn(self.destroy(sandbox, reason))
        return reason

    def _forget_warm(self, sandbox: Sandbox) -> None:
        pool = self.warm.get(sandbox.server)
        if pool and sandbox in pool:
            pool.remove(sandbox)
        if sandbox.spare_for is not None:
            key = (sandbox.server, sandbox.image, sandbox.spare_for)
            if self.spares.get(key) is sandbox:
                del self.spares[key]

    def _bury(self, sandbox_id: str, reason: str) -> None:
        self.tombstones[sandbox_id] = reason
        while len(self.tombstones) > TOMBSTONES:
            self.tombstones.popitem(last=False)

    async def destroy(self, sandbox: Sandbox, reason: str) -> None:
        if sandbox.state == "removing" or self.sandboxes.get(sandbox.id) is not sandbox:
            return
        sandbox.state = "removing"
        self.tombstones.setdefault(sandbox.id, f"sandbox was {reason}" if reason in ("released",) else reason)
        self._forget_warm(sandbox)
        try:
            if sandbox.channel is not None:
                await sandbox.channel.aclose()
            if sandbox.container_id:
                await self.backend.remove(sandbox.container_id)
        except Exception:  # noqa: BLE001 - `down` removes what is left by label
            LOG.exception("removing sandbox %s failed", sandbox.id)
        finally:
            self.sandboxes.pop(sandbox.id, None)
            await self.admission.give_back()
            if not self.closing:
                self._schedule_refill(sandbox.server)
                if sandbox.image in self.image_cache:
                    self._trim_images()
                if self.snapshots.retired:  # it may have run from a deleted snapshot's image
                    await self.snapshots.prune()

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(REAP_INTERVAL_S)
            try:
                await self.reap()
            except Exception:  # noqa: BLE001 - the reaper must keep running
                LOG.exception("sandbox reaper failed")

    async def reap(self) -> builtins.list[str]:  # `list` here is the method above
        now = time.monotonic()
        expired = []
        for sandbox in list(self.sandboxes.values()):
            if sandbox.state not in ("leased", "paused", "warm") or sandbox.busy:
                continue
            ttl = sandbox.ttl_s or sandbox.policy.ttl_s
            if now - sandbox.started >= ttl:
                expired.append((sandbox, f"sandbox reached its time-to-live ({ttl:g} s)"))
            elif sandbox.spare_for and now - sandbox.started >= sandbox.policy.warm_spare_s:
                expired.append((sandbox, f"spare not taken within warm_spare_s ({sandbox.policy.warm_spare_s:g} s)"))
            elif sandbox.state in ("leased", "paused") and now - sandbox.last_used >= self.settings.idle_timeout_s:
                expired.append((sandbox, f"sandbox was idle for {self.settings.idle_timeout_s:g} s and was reaped"))
        for sandbox, reason in expired:
            self._bury(sandbox.id, reason)
            await self.destroy(sandbox, reason)
        for server in self.settings.servers:
            self._schedule_refill(server)
        return [sandbox.id for sandbox, _ in expired]


def _not_paused(sandbox: Sandbox) -> None:
    if sandbox.state == "paused":
        raise Conflict(f"sandbox {sandbox.id} is paused; resume it first (POST /v1/sandboxes/{sandbox.id}/resume, "
                       "AsyncSandbox.resume(), gym-compose sandbox resume)")


def _quantile(ordered: list[float], q: float) -> Optional[float]:
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4)
