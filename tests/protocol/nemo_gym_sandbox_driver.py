"""Drives NeMo Gym 0.7's own sandbox API (`nemo_gym.sandbox`) against a gym-compose broker, as a
NeMo Gym-runtime server does: run as a child process by test_nemo_gym_sandbox_provider.py with the
real nemo-gym package and the runtime image's entry point on its path; prints what it saw as JSON."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from nemo_gym.sandbox import (
    AsyncSandbox,
    SandboxCreateError,
    SandboxSpec,
    SandboxStatus,
    create_provider,
    list_providers,
    resolve_provider_config,
    resolve_provider_metadata,
)

from gym_compose.sandbox.nemo_gym_routing import route_to_broker


async def refused(spec: SandboxSpec) -> str:
    try:
        await AsyncSandbox({"gym_compose": {}}).start(spec)
    except SandboxCreateError as error:  # NeMo Gym's class: what its servers catch
        return str(error)
    return "started"


async def main() -> dict:
    config = {"sandbox": {"docker": {"exec": {"concurrency": 8}}, "default_metadata": {"team": "x"}}}
    agent = {"sandbox_provider": "sandbox"}
    seen: dict = {"notice": route_to_broker(config, agent), "providers": list_providers()}
    provider = create_provider(resolve_provider_config(agent["sandbox_provider"], config))
    seen["provider"] = f"{type(provider).__module__}.{type(provider).__name__}"
    seen["metadata"] = resolve_provider_metadata(agent["sandbox_provider"], config)
    sandbox = await AsyncSandbox(provider).start(SandboxSpec(env={"GREETING": "hi"}, files={"seed/in.txt": "seeded"},
                                                            resources={"cpu": 0.5}, metadata=seen["metadata"]))
    result = await sandbox.exec("echo $GREETING; cat seed/in.txt; echo err >&2; exit 4")
    seen["exec"] = [type(result).__module__, result.return_code, result.stdout, result.stderr, result.error_type]
    slow = await sandbox.exec("sleep 20", timeout_s=0.3)
    seen["timeout"] = [slow.return_code, slow.error_type]
    other = await sandbox.exec("id", user="nobody")
    seen["user"] = [other.return_code, other.error_type, other.stderr]
    with tempfile.TemporaryDirectory() as folder:
        local = Path(folder, "in.bin")
        local.write_bytes(b"\x00\x01binary\xff")
        await sandbox.upload(local, "up/copy.bin")
        await sandbox.download("up/copy.bin", Path(folder, "back", "copy.bin"))
        seen["round_trip"] = Path(folder, "back", "copy.bin").read_bytes() == local.read_bytes()
    seen["status"] = (await sandbox.status()) == SandboxStatus.RUNNING
    descriptor = await sandbox.serialize()
    borrowed = await AsyncSandbox.connect(descriptor, provider=create_provider({"gym_compose": {}}))
    seen["connected"] = (await borrowed.exec("cat seed/in.txt")).stdout
    await borrowed.disconnect()
    await sandbox.pause()  # NeMo Gym's SupportsSandboxPauseResume
    frozen = await sandbox.exec("true")
    await sandbox.resume()
    seen["paused"] = [frozen.return_code, frozen.error_type, "is paused" in frozen.stderr,
                      (await sandbox.exec("echo thawed")).stdout]
    await sandbox.stop()
    seen["stopped"] = (await sandbox.status()) == SandboxStatus.STOPPED
    seen["refused"] = {
        "gpu": await refused(SandboxSpec(resources={"gpu": 1})),
        "ports": await refused(SandboxSpec(ports=[8080])),
        "entrypoint": await refused(SandboxSpec(entrypoint=["/bin/server"])),
        "image": await refused(SandboxSpec(image="python:3.12")),
    }
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())), file=sys.stdout)
