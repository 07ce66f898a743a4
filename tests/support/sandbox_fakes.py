"""A stand-in for the Docker engine for broker tests: each "container" is a local process running
the real sandbox agent, and attach hands out its stdio in Docker's multiplexed framing. The
broker's pool, channel, HTTP API and the client run unchanged on top of it."""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import sys
import time
import uuid
from typing import Any, Optional

from gym_compose.sandbox.broker.broker_errors import BackendError, BrokerError, NotFound

FRAME = struct.Struct(">BxxxI")


class FakeBackend:
    moves_phases = True

    def __init__(self, cores: int = 2, memory: int = 8 << 30, images: Optional[set[str]] = None):
        self.cores, self.memory = cores, memory
        self.known_images = images  # None: every image exists
        self.boxes: dict[str, dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []
        self.removed: list[str] = []
        self.pulls: list[str] = []
        self.pullable: set[str] = set()  # images a registry would give
        self.helpers: list[dict[str, Any]] = []  # one-shot containers run to their end
        self.helper_result: tuple[int, str] = (0, "")
        self.committed: dict[str, dict[str, str]] = {}  # image -> labels (snapshots)
        self.image_ids: dict[str, str] = {}  # a committed image's id -> its repository:tag
        self.image_sizes: dict[str, int] = {}  # default 1 GiB
        self.image_workdirs: dict[str, str] = {}  # an image's WORKDIR (default: none)
        self.removed_images: list[str] = []  # by the image budget
        self.paused: set[str] = set()
        self.network_calls: list[tuple[str, str, Optional[str], Optional[str]]] = []  # (call, name, leave, join)
        self.move_error: Optional[BrokerError] = None  # what the next move raises

    async def pull(self, image: str, progress) -> None:
        self.pulls.append(image)
        await asyncio.sleep(0.05)
        if image not in self.pullable:
            raise BackendError(f"pull access denied for {image}")
        progress(f"pulling {image}: done")
        self.known_images.add(image)

    async def info(self) -> dict[str, Any]:
        return {"NCPU": self.cores, "MemTotal": self.memory}

    async def image_exists(self, image: str) -> bool:
        return self.known_images is None or image in self.known_images

    async def network_exists(self, name: str) -> bool:
        return True

    async def image_workdir(self, image: str) -> Optional[str]:
        return self.image_workdirs.get(image)

    async def create(self, config: dict[str, Any], name: str) -> str:
        if not await self.image_exists(config["Image"]):
            raise NotFound(f"No such image: {config['Image']}")
        container_id = uuid.uuid4().hex
        self.boxes[container_id] = {"config": config, "name": name, "process": None, "oom": False,
                                    "labels": config["Labels"], "network": config["HostConfig"]["NetworkMode"]}
        self.created.append(config)
        return container_id

    async def attach(self, container_id: str):
        container = self._get(container_id)
        config = container["config"]
        source, ttl = config["Entrypoint"][4], config["Entrypoint"][5]
        env = dict(item.split("=", 1) for item in config["Env"])
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", "-u", "-c", source, ttl, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=config["WorkingDir"], env=env,
            start_new_session=True)
        container["process"] = process
        reader = asyncio.StreamReader(limit=1 << 26)

        async def pump(stream, kind):
            while True:
                chunk = await stream.read(65536)
                if not chunk:
                    return
                reader.feed_data(FRAME.pack(kind, len(chunk)) + chunk)

        async def feed():
            await asyncio.gather(pump(process.stdout, 1), pump(process.stderr, 2))
            reader.feed_eof()

        container["pump"] = asyncio.get_running_loop().create_task(feed())
        return reader, process.stdin

    async def start(self, container_id: str) -> None:
        self._get(container_id)

    async def run_to_end(self, config: dict[str, Any], name: str) -> tuple[int, str]:
        self._get(config["HostConfig"]["NetworkMode"].removeprefix("container:"))  # its sandbox exists
        self.helpers.append(config)
        return self.helper_result

    async def inspect(self, container_id: str) -> dict[str, Any]:
        container = self._get(container_id)
        process = container["process"]
        running = process is not None and process.returncode is None
        return {"State": {"Running": running, "OOMKilled": container["oom"],
                          "ExitCode": None if running else process.returncode if process else 0}}

    async def remove(self, container_id: str) -> None:
        container = self.boxes.pop(container_id, None)
        if container is None:
            return
        self.removed.append(container["name"])
        await _stop(container["process"])

    async def containers(self, labels: list[str]) -> list[dict[str, Any]]:
        def matches(container):
            for label in labels:
                key, _, value = label.partition("=")
                if key not in container["labels"] or (value and container["labels"][key] != value):
                    return False
            return True

        return [{"Id": cid} for cid, c in self.boxes.items() if matches(c)]

    async def commit(self, container_id: str, repository: str, tag: str, labels: dict[str, str]) -> str:
        self._get(container_id)
        image = f"{repository}:{tag}"
        self.committed[image] = dict(labels)
        if self.known_images is not None:
            self.known_images.add(image)
        image_id = f"sha256:{uuid.uuid4().hex}"
        self.image_ids[image_id] = image
        return image_id

    async def remove_image(self, image: str) -> None:
        self.committed.pop(image, None)
        if self.known_images is not None:
            self.known_images.discard(image)

    async def image_size(self, image: str) -> int:
        return self.image_sizes.get(image, 1 << 30)

    async def remove_unused_image(self, image: str) -> bool:
        named = self.image_ids.get(image, image)  # an id of a committed image: the tag it was made with
        if any(box["config"]["Image"] in (image, named) for box in self.boxes.values()):
            return False
        self.removed_images.append(image)
        if self.known_images is not None:
            self.known_images.discard(image)
        return True

    async def images(self, labels: list[str]) -> list[str]:
        wanted = [label.partition("=") for label in labels]
        return [image for image, have in self.committed.items()
                if all(key in have and (not value or have[key] == value) for key, _, value in wanted)]

    async def pause(self, container_id: str) -> None:
        process = self._get(container_id)["process"]
        os.killpg(process.pid, signal.SIGSTOP)
        self.paused.add(container_id)

    async def unpause(self, container_id: str) -> None:
        process = self._get(container_id)["process"]
        os.killpg(process.pid, signal.SIGCONT)
        self.paused.discard(container_id)

    async def detach(self, container_id: str, network: str) -> None:
        container = self._get(container_id)
        assert container["process"] is None, "detached after its start"
        self.network_calls.append(("detach", container["name"], network, None))
        container["network"] = None

    async def move_to_phase(self, container_id: str, leave: Optional[str], join: Optional[str], phase: str) -> None:
        container = self._get(container_id)
        assert container["network"] == leave, (container["network"], leave)
        self.network_calls.append(("move", container["name"], leave, join))
        if self.move_error is not None:
            error, self.move_error = self.move_error, None
            container["network"] = None  # off the old network, not on the new one
            raise error
        container["network"] = join

    def network_of(self, name: str) -> Optional[str]:
        (container,) = [c for c in self.boxes.values() if c["name"] == name]
        return container["network"]

    async def stats(self, container_id: str) -> dict[str, Any]:
        self._get(container_id)
        return {}

    async def kill(self, name: str, oom: bool = False) -> None:
        """Make a sandbox die as if the kernel killed it (OOM) or it exited."""
        container = next(c for c in self.boxes.values() if c["name"] == name)
        container["oom"] = oom
        await _stop(container["process"])

    def live_names(self) -> list[str]:
        return sorted(c["name"] for c in self.boxes.values())

    async def aclose(self) -> None:
        for container_id in list(self.boxes):
            await self.remove(container_id)

    def _get(self, container_id: str) -> dict[str, Any]:
        try:
            return self.boxes[container_id]
        except KeyError:
            raise NotFound(f"No such container: {container_id}") from None


async def _stop(process) -> None:
    if process is None or process.returncode is not None:
        return
    process.kill()
    await process.wait()


def run_async(function):
    """Run an `async def` test in its own event loop (the suite does not use an asyncio plugin)."""
    import functools

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return asyncio.run(asyncio.wait_for(function(*args, **kwargs), 120))

    return wrapper


async def until(condition, what: str, timeout: float = 30.0) -> None:
    """Wait for `condition()` (polled; bounded by `timeout`), else fail naming `what`."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
