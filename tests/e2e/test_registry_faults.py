"""A registry's faults on the real engine, through the broker's pool on the Docker backend (the
broker's own code, run in the test process): a loopback registry (Debian's docker-registry) behind
tests/support/registry_proxy.py, which makes each fault by construction in the middle of a layer.

- a pull that hangs mid-layer is given up after the backend's pull_stall_s, the lease fails saying
  so, and once the registry answers again the next lease pulls and starts;
- a connection cut mid-layer is retried by the engine (from where it broke off) and the lease starts;
- a layer whose bytes do not match its digest fails the lease at once, naming the digest check and
  what to do, and leaves nothing of the image on the engine; a later lease with the registry
  serving the right bytes starts.

The image is the default sandbox image plus one layer unique to this run (a random file), pushed
to the registry and removed from the engine before each test, so each pull downloads that layer."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid

import pytest

from tests.e2e import PROJECT_PREFIX
from tests.support.registry import start_registry
from tests.support.registry_proxy import RegistryProxy

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]
REPOSITORY = "faults/task"
LAYER_BYTES = 4 << 20
STALL_S = 5.0


def docker(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def registry_image(tmp_path_factory):
    """(proxy, the image's name through the proxy, the digest of its own layer, its marker text)."""
    from gym_compose.engine.images.lean_images import ensure_base_image
    from gym_compose.engine.images.sandbox_images import ensure_default_sandbox_image

    sandbox_image = ensure_default_sandbox_image(ensure_base_image(progress=lambda line: None), lambda line: None)
    folder = tmp_path_factory.mktemp("registry-faults")
    registry = start_registry(folder / "registry")
    try:
        with RegistryProxy(registry.address) as proxy:
            build = folder / "build"
            build.mkdir()
            marker = os.urandom(16).hex()
            (build / "marker").write_text(marker)
            (build / "payload").write_bytes(os.urandom(LAYER_BYTES))  # incompressible: the layer stays large
            (build / "Dockerfile").write_text(f"FROM {sandbox_image}\nCOPY marker payload /opt/fault-test/\n")
            pushed = f"{registry.address}/{REPOSITORY}:one"
            ok(docker("build", "-q", "-t", pushed, str(build)))
            ok(docker("push", pushed))
            ok(docker("rmi", pushed))
            own_layer = proxy.layers(REPOSITORY, "one")[-1]
            yield proxy, f"{proxy.address}/{REPOSITORY}:one", own_layer, marker, sandbox_image
    finally:
        registry.stop()


@pytest.fixture
def fresh(registry_image):
    """The image absent from the engine, the proxy passing everything, before and after the test."""
    proxy, image, *_ = registry_image
    docker("rmi", "-f", image)
    assert docker("image", "inspect", image).returncode != 0
    proxy.set("pass")
    proxy.applied.clear()
    yield registry_image
    proxy.release()
    proxy.set("pass")
    docker("rmi", "-f", image)




async def lease_marker(pool, image: str) -> str:
    from gym_compose.sandbox.policy import ExecRequest, LeaseRequest

    sandbox, _ = await pool.lease("s", LeaseRequest(image=image))
    done = await pool.exec(sandbox, ExecRequest(command="cat /opt/fault-test/marker"))
    await pool.release(sandbox)
    assert done["return_code"] == 0, done
    return done["stdout"]


def opened_pool(project: str, sandbox_image: str, image: str):
    from gym_compose.sandbox.broker.docker_backend import DockerBackend
    from gym_compose.sandbox.broker.pool import SandboxPool
    from gym_compose.sandbox.policy import BrokerSettings, SandboxPolicy

    policy = SandboxPolicy(server="s", image=sandbox_image, allowed_images=[image.rsplit(":", 1)[0] + ":*"],
                           pull=True, network="none", memory_bytes=128 << 20, ready_timeout_s=120)
    return SandboxPool(DockerBackend(pull_stall_s=STALL_S), BrokerSettings(project=project, servers={"s": policy}))


def failed_then_leased(name: str, fresh, between) -> tuple[str, object, str]:
    """Lease the image once in a fresh pool (it must fail to start), call `between()` (the registry
    is then set to pass everything), lease it again: (the failure, what `between` said, the marker read)."""
    from gym_compose.sandbox.broker.broker_errors import StartFailed

    proxy, image, _, _, sandbox_image = fresh

    async def scenario():
        pool = opened_pool(f"{PROJECT_PREFIX}-{name}-{uuid.uuid4().hex[:6]}", sandbox_image, image)
        await pool.open()
        try:
            with pytest.raises(StartFailed) as failed:
                await lease_marker(pool, image)
            said = between()
            proxy.set("pass")
            return str(failed.value), said, await lease_marker(pool, image)
        finally:
            await pool.close()

    return asyncio.run(scenario())


def test_a_pull_that_hangs_mid_layer_is_given_up_and_the_next_lease_pulls_again(fresh):
    proxy, image, layer, marker, _ = fresh
    proxy.set("stall", only=(layer,))

    def registry_answers_again() -> bool:
        held = proxy.stalled.is_set()
        proxy.release()
        return held

    message, held, after = failed_then_leased("stall", fresh, registry_answers_again)
    assert held, "the proxy never held the layer: the fault did not land mid-pull"
    assert f"the pull of {image} made no progress for {STALL_S:g} s" in message, message
    assert "pull_stall_s" in message
    assert after == marker
    assert proxy.applied == [("stall", layer)]


def test_a_connection_cut_mid_layer_is_resumed_by_the_engine_and_the_lease_starts(fresh, tmp_path):
    proxy, image, layer, marker, sandbox_image = fresh
    proxy.set("cut_once", only=(layer,))

    async def scenario():
        pool = opened_pool(f"{PROJECT_PREFIX}-cut-{tmp_path.name[-6:]}".lower(), sandbox_image, image)
        await pool.open()
        try:
            return await lease_marker(pool, image)
        finally:
            await pool.close()

    assert asyncio.run(scenario()) == marker
    assert proxy.applied == [("cut_once", layer)], "the connection was never cut"


def test_a_layer_that_does_not_match_its_digest_fails_the_lease_naming_the_check(fresh):
    proxy, image, layer, marker, _ = fresh
    proxy.set("corrupt", only=(layer,))

    def image_absent() -> bool:  # then the registry's blob is pushed again, say
        return docker("image", "inspect", image).returncode != 0

    message, absent, after = failed_then_leased("digest", fresh, image_absent)
    assert f"cannot pull image '{image}'" in message and "verification failed" in message, message
    assert "does not match its digest" in message
    assert absent, "a failed pull left the image on the engine"
    assert after == marker
