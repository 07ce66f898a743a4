"""The sandbox broker's Kubernetes backend against a fake API server on loopback (kube_fake.py):
the requests it makes (pods in its namespace, with its token, the pod its policy implies), and the
broker's pool leasing, running commands in and releasing sandboxes through it, the real agent
running as each pod's process behind the attach stream."""

from __future__ import annotations

import asyncio

import pytest

from gym_compose.sandbox.broker.broker_errors import BackendError
from gym_compose.sandbox.broker.kubernetes_backend import KubernetesBackend
from gym_compose.sandbox.broker.launch import container_config
from gym_compose.sandbox.broker.pod import WAIT_FOR_ATTACH, pod_manifest
from gym_compose.sandbox.broker.pool import SandboxPool
from gym_compose.sandbox.policy import BrokerSettings, ExecRequest, LeaseRequest, SandboxPolicy
from tests.support.kube_fake import NAMESPACE, TOKEN, FakeKubernetes
from tests.support.sandbox_fakes import run_async

pytestmark = pytest.mark.protocol
IMAGE = "registry.example/gym/sandbox:1"


@pytest.fixture
def api():
    fake = FakeKubernetes().start()
    yield fake
    fake.stop()


def policy(tmp_path, **fields) -> SandboxPolicy:
    return SandboxPolicy(server="coder", image=IMAGE, workdir=str(tmp_path), network="internal",
                         network_name="p_sandbox", memory_bytes=256 << 20, cpus=0.5, pids=64, **fields)


def engine_for(api: FakeKubernetes, token: str = TOKEN) -> KubernetesBackend:
    return KubernetesBackend(api_url=api.url, namespace=NAMESPACE, token=token, owners={"coder": "coder-svc"})


def test_the_pod_carries_the_policy_and_the_labels_the_network_policies_select(tmp_path):
    config = container_config("proj", policy(tmp_path, read_only=True, user="1000:1000", cap_add=["CHOWN"],
                                             env={"A": "1"}), IMAGE, engine_cpus=4)
    pod = pod_manifest(config, "proj-sbx-coder-abc", "coder-svc")
    assert pod["metadata"]["labels"] == {"app.kubernetes.io/part-of": "proj", "gym-compose.io/role": "sandbox",
                                         "gym-compose.io/sandbox-owner": "coder-svc"}
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    assert container["stdin"] and container["stdinOnce"] and not container["tty"]
    assert container["resources"]["limits"] == {"memory": "256Mi", "cpu": "500m"}
    assert container["securityContext"] == {
        "privileged": False, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}, "runAsUser": 1000, "runAsGroup": 1000}
    assert container["env"] == [{"name": "A", "value": "1"}]
    assert container["command"][2].startswith(WAIT_FOR_ATTACH)  # the agent waits until the broker is attached
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v["emptyDir"] for v in spec["volumes"]}
    assert volumes[mounts["/tmp"]] == {"medium": "Memory", "sizeLimit": "64Mi"}
    assert volumes[mounts[str(tmp_path)]] == {"medium": "Memory", "sizeLimit": str(256 << 20)}


def test_the_pods_validate_against_the_kubernetes_api_schema(tmp_path):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    config = container_config("proj", policy(tmp_path, read_only=True), IMAGE, engine_cpus=4)
    kubernetes_validate.validate(pod_manifest(config, "proj-sbx-coder-abc", "coder-svc"), "1.30", strict=True)


@run_async
async def test_the_pool_leases_runs_and_releases_sandboxes_as_pods(api, tmp_path):
    engine = engine_for(api)
    pool = SandboxPool(engine, BrokerSettings(project="proj", servers={"coder": policy(tmp_path)}))
    await pool.open()
    try:
        sandbox, _ = await pool.lease("coder", LeaseRequest(env={"FROM_LEASE": "l"}))
        (name,) = api.pods
        assert api.pods[name]["metadata"]["labels"]["gym-compose.io/sandbox-owner"] == "coder-svc"
        result = await pool.exec(sandbox, ExecRequest(command="echo $FROM_LEASE; pwd; echo oops >&2; exit 3"))
        assert result["return_code"] == 3
        assert result["stdout"] == f"l\n{tmp_path}\n" and result["stderr"] == "oops\n"
        await pool.release(sandbox)
        assert api.pods == {}
    finally:
        await pool.close()
    paths = {(r["method"], r["path"]) for r in api.requests}
    base = f"/api/v1/namespaces/{NAMESPACE}/pods"
    assert ("POST", base) in paths and ("WEBSOCKET", f"{base}/{name}/attach") in paths
    assert ("DELETE", f"{base}/{name}") in paths
    assert all(r["path"].startswith(base) for r in api.requests)  # nothing outside its namespace's pods
    assert all(r["authorization"] == f"Bearer {TOKEN}" for r in api.requests)
    listing = next(r for r in api.requests if r["method"] == "GET" and r["path"] == base
                   and any(k == "labelSelector" for k, _ in r["query"]))
    assert dict(listing["query"])["labelSelector"] == "gym-compose.io/role=sandbox,app.kubernetes.io/part-of=proj"


@run_async
async def test_exec_fallback_runs_one_command_with_its_exit_code(api, tmp_path, monkeypatch):
    engine = engine_for(api)
    monkeypatch.setenv("GYM_COMPOSE_SANDBOX_NODE_CPUS", "7")
    info = await engine.info()  # the pool's caps: the node's size, or what the manifests say
    assert info["NCPU"] == 7 and info["MemTotal"] > 0
    config = container_config("proj", policy(tmp_path), IMAGE, engine_cpus=4)
    name = await engine.create(config, "proj-sbx-coder-x1")
    await engine.start(name)
    code, out, err = await engine.exec_run(name, ["sh", "-c", "echo $X; echo e >&2; exit 4"], str(tmp_path),
                                           {"X": "from-env"})
    assert (code, out, err) == (4, b"from-env\n", b"e\n")
    assert (await engine.exec_run(name, ["true"], None, {}))[0] == 0
    await engine.remove(name)
    await engine.remove(name)  # already gone: no error
    assert (await engine.containers(["io.gym-compose.project=proj"])) == []


@run_async
async def test_a_dead_pod_reads_as_an_exited_container_and_a_refusal_says_why(api, tmp_path):
    engine = engine_for(api)
    config = container_config("proj", policy(tmp_path), IMAGE, engine_cpus=4)
    name = await engine.create(config, "proj-sbx-coder-x2")
    api.processes[name].kill()
    for _ in range(100):
        state = (await engine.inspect(name))["State"]
        if not state["Running"]:
            break
        await asyncio.sleep(0.05)
    assert state["Running"] is False and state["ExitCode"] == -9
    with pytest.raises(BackendError, match="401 Unauthorized"):
        await engine_for(api, token="wrong").info()
