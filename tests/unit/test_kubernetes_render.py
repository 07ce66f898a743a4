"""The kubernetes target's renderer: the plan's words mapped to manifests, validated offline
against the Kubernetes API schemas (kubernetes-validate; no cluster needed)."""

import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gym_compose.config import load
from gym_compose.config.request import ConfigRequest
from gym_compose.errors import UserError
from gym_compose.plan.model import StackOptions
from gym_compose.plan.planner import plan_stack
from gym_compose.render.kubernetes import (
    IN_NETWORK_LABEL,
    SANDBOX_CLIENT_LABEL,
    kubernetes_manifests,
    quantity,
    write_manifests,
)
from tests.support.network_policies import allowed, connects
from tests.support.plans import weather_config

K8S_VERSION = "1.30.0"
IMAGES = {"base": "reg.example/gym/base:abc", "sandbox-broker": "reg.example/gym/sandbox_broker:def"}


@pytest.fixture
def roots(tmp_path: Path) -> list[Path]:
    impl = tmp_path / "server_images" / "weather_impl"
    impl.mkdir(parents=True)
    (impl / "app.py").write_text("print('hi')\n")
    return [tmp_path]


def validate_all(documents: list[dict]) -> None:
    for document in documents:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)


def by_kind(manifests: list[dict], kind: str) -> dict[str, dict]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


def test_the_plan_maps_to_probes_limits_replicas_secrets_and_policies(roots):
    config = weather_config("sk-very-secret")
    config["weather"]["resources_servers"]["weather_impl"]["docker"] = {
        "memory": "2g", "cpus": 1.5, "gpus": 2, "replicas": 3, "placement": ["node.labels.pool==gpu"],
        "reservations": {"memory": "1g", "cpus": 0.5}, "shm_size": "256m"}
    stack = plan_stack(config, roots, StackOptions(project="p"))
    manifests, secret = kubernetes_manifests(stack, IMAGES)
    validate_all([*manifests, secret])
    deployments, services = by_kind(manifests, "Deployment"), by_kind(manifests, "Service")
    assert set(deployments) == set(services) == {s.name for s in stack.services}

    weather = deployments["weather"]
    assert weather["spec"]["replicas"] == 3
    pod = weather["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu"} and pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["resources"] == {"limits": {"memory": "2Gi", "cpu": "1.5", "nvidia.com/gpu": 2},
                                      "requests": {"memory": "1Gi", "cpu": "0.5"}}
    ready = {"httpGet": {"path": "/_gym_compose/ready", "port": 8000}}
    assert container["readinessProbe"].items() >= ready.items()
    assert container["startupProbe"].items() >= ready.items()
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] >= 30
    assert container["livenessProbe"]["tcpSocket"] == {"port": 8000}
    assert container["securityContext"]["runAsUser"] == 10001 and container["securityContext"]["readOnlyRootFilesystem"]
    assert {"name": "shm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    # replicas: each pod stamps its sessions with its own address; all share the cookie key
    env = {e["name"]: e for e in container["env"]}
    assert env["GYM_COMPOSE_REPLICA_ADDRESS"]["value"] == "$(POD_IP):8000"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["GYM_COMPOSE_SESSION_KEY_FILE"]["value"] == "/run/secrets/session_key.weather"
    (weather_secrets,) = [v for v in pod["volumes"] if v["name"] == "secrets"]
    assert [item["key"] for item in weather_secrets["secret"]["items"]] == ["session_key.weather"]

    # the head serves the host view; every server reads the in-network view from the ConfigMap
    head_env = {e["name"]: e for e in deployments["head"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert head_env["GYM_COMPOSE_HEAD_VIEW"]["valueFrom"]["configMapKeyRef"]["key"] == "host.yaml"
    assert services["head"]["spec"]["ports"][0]["port"] == 11000
    config_map = by_kind(manifests, "ConfigMap")["p-config"]
    network = yaml.safe_load(config_map["data"]["network.yaml"])
    assert network["weather"]["resources_servers"]["weather_impl"]["host"] == "weather"

    # secrets: only in the Secret, each pod mounts only its own keys at /run/secrets
    assert "sk-very-secret" not in yaml.safe_dump_all(manifests)
    assert "sk-very-secret" in secret["stringData"].values()
    model_pod = deployments["policy-model"]["spec"]["template"]["spec"]
    (secrets_volume,) = [v for v in model_pod["volumes"] if v["name"] == "secrets"]
    assert [item["key"] for item in secrets_volume["secret"]["items"]] == stack.service("policy-model").secrets

    # the collector: a Job that waits for the head, results on a claim
    job = by_kind(manifests, "Job")["p-collector"]
    assert job["spec"]["template"]["spec"]["initContainers"][0]["name"] == "wait-for-head"
    assert "p-results" in by_kind(manifests, "PersistentVolumeClaim")
    # the project network: servers and the collector only
    (policy,) = by_kind(manifests, "NetworkPolicy").values()
    assert policy["spec"]["podSelector"]["matchLabels"][IN_NETWORK_LABEL] == "true"


def test_settings_kubernetes_cannot_express_are_clear_errors(roots):
    for block, words in (({"gpus": "all"}, "GPU count"), ({"gpus": ["0"]}, "by count"),
                         ({"placement": ["node.role==manager"]}, "nodeSelector"),
                         ({"volumes": ["/data:/data"]}, "compose volumes")):
        config = weather_config()
        config["weather"]["resources_servers"]["weather_impl"]["docker"] = block
        stack = plan_stack(config, roots)
        with pytest.raises(UserError, match=words):
            kubernetes_manifests(stack, IMAGES)


def test_quantities():
    assert [quantity(v, "x") for v in ("512m", "2g", "1.5gb", "64k", 1048576)] == ["512Mi", "2Gi", "1.5Gi", "64Ki",
                                                                                 "1048576"]
    with pytest.raises(UserError, match="not a size"):
        quantity("lots", "x")


@pytest.mark.parametrize("benchmark", ["example_single_tool_call", "swebench_mini"])
def test_benchmark_manifests_pass_the_api_schemas(benchmark, tmp_path):
    loaded = load(ConfigRequest(benchmarks=[benchmark]))
    stack = plan_stack(loaded.data, loaded.search_roots, StackOptions(project="bench"))
    out = write_manifests(stack, IMAGES, tmp_path / "k8s")
    documents = list(yaml.safe_load_all(out.read_text()))
    secret_file = tmp_path / "k8s" / "secrets.yaml"
    if secret_file.exists():
        assert secret_file.stat().st_mode & 0o077 == 0
        documents += list(yaml.safe_load_all(secret_file.read_text()))
    validate_all(documents)
    if benchmark != "swebench_mini":
        return
    # sandboxes: the broker alone has a service account, whose role reaches pods only
    role = by_kind(documents, "Role")["bench-sandbox-broker"]
    assert {resource for rule in role["rules"] for resource in rule["resources"]} == {
        "pods", "pods/exec", "pods/attach", "pods/log"}
    accounts = {d["metadata"]["name"]: d["spec"]["template"]["spec"].get("serviceAccountName")
                for d in documents if d["kind"] == "Deployment"}
    assert [name for name, account in accounts.items() if account] == ["sandbox-broker"]
    policies = by_kind(documents, "NetworkPolicy")
    control = policies["bench-sandbox-control"]["spec"]
    assert control["ingress"][0]["from"][0]["podSelector"]["matchLabels"][SANDBOX_CLIENT_LABEL] == "true"
    sandboxes = policies["bench-sandboxes-swebench-mini-resources-server"]["spec"]
    assert sandboxes["policyTypes"] == ["Ingress", "Egress"]
    # swebench_mini's sandboxes have no network (their agent speaks through the broker): deny all
    assert stack.sandboxes is not None and stack.sandboxes.servers[0].policy.network == "none"
    assert sandboxes["ingress"] == sandboxes["egress"] == []
    # the broker creates pods (Kubernetes backend) whose owner label is the one this policy selects
    broker = by_kind(documents, "Deployment")["sandbox-broker"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in broker["env"]}
    assert env["GYM_COMPOSE_SANDBOX_BACKEND"] == "kubernetes"
    owners = json.loads(env["GYM_COMPOSE_SANDBOX_OWNERS"])
    assert owners == {server.policy.server: server.service for server in stack.sandboxes.servers}
    assert sandboxes["podSelector"]["matchLabels"]["gym-compose.io/sandbox-owner"] in owners.values()
    # a re-render keeps the sandbox tokens of a running stack
    first = secret_file.read_text()
    write_manifests(stack, IMAGES, tmp_path / "k8s")
    assert secret_file.read_text() == first


def test_sandbox_networks_map_to_policies(tmp_path):
    from tests.support.plans import sandbox_stack_config as config

    for name in ("coder_impl", "plain_impl"):
        (tmp_path / "server_images" / name).mkdir(parents=True)
        (tmp_path / "server_images" / name / "app.py").write_text("print('hi')\n")
    owner = {"podSelector": {"matchLabels": {"app.kubernetes.io/part-of": "p", "app.kubernetes.io/name": "coder"}}}
    for network, ingress, egress in (("internal", [{"from": [owner]}], None), ("egress", [{"from": [owner]}], [{}])):
        stack = plan_stack(config({"image": "python:3.12-slim", "network": network}), [tmp_path],
                           StackOptions(project="p"))
        manifests, secret = kubernetes_manifests(stack, {**IMAGES, "sandbox:coder": "reg.example/gym/sandbox:1"})
        validate_all([*manifests, secret])
        spec = by_kind(manifests, "NetworkPolicy")["p-sandboxes-coder"]["spec"]
        assert spec["podSelector"]["matchLabels"]["gym-compose.io/sandbox-owner"] == "coder"
        assert spec["ingress"] == ingress
        if egress is None:  # internal: DNS only (its own server connects to it, never the other way)
            (dns,) = spec["egress"]
            assert dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
            assert {port["port"] for port in dns["ports"]} == {53}
        else:
            assert spec["egress"] == egress
        coder = by_kind(manifests, "Deployment")["coder"]["spec"]["template"]
        assert coder["metadata"]["labels"][SANDBOX_CLIENT_LABEL] == "true"
        env = {e["name"]: e.get("value") for e in coder["spec"]["containers"][0]["env"]}
        assert env["GYM_COMPOSE_SANDBOX_BROKER"] == "http://sandbox-broker:8000"
        assert env["GYM_COMPOSE_SANDBOX_TOKEN_FILE"].startswith("/run/secrets/")


def test_a_nemo_gym_runtime_server_gets_the_same_default_memory_as_under_compose(roots):
    config = weather_config()
    config["weather"]["resources_servers"]["weather_impl"]["docker"] = {"runtime": "nemo_gym"}
    manifests, _ = kubernetes_manifests(plan_stack(config, roots, StackOptions(project="p")), IMAGES)
    deployments = by_kind(manifests, "Deployment")
    limit = {name: d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
             for name, d in deployments.items() if name in ("weather", "weather-env")}
    assert limit == {"weather": quantity("2g", "x"), "weather-env": quantity("512m", "x")}


def test_no_pod_of_the_project_admits_a_sandbox_and_a_sandbox_admits_only_its_owner(tmp_path):
    """The NetworkPolicies evaluated as a cluster applies them, over every pod the manifests make and
    the sandbox pods the broker makes (its own pod_manifest), for each network policy."""
    from gym_compose.sandbox.broker.launch import container_config
    from gym_compose.sandbox.broker.pod import pod_manifest

    for name in ("coder_impl", "plain_impl"):
        (tmp_path / "server_images" / name).mkdir(parents=True)
        (tmp_path / "server_images" / name / "app.py").write_text("print('hi')\n")
    networks = {"none": "none", "internal": "internal", "egress": "egress",
                "allowlist": {"egress": {"allow": ["pypi.org"]}}}
    data = {f"box_{key}": {"resources_servers": {"coder_impl": {
        "entrypoint": "app.py", "sandbox_config": {"image": "python:3.12-slim", "network": network}}}}
        for key, network in networks.items()}
    data["plain"] = {"resources_servers": {"plain_impl": {"entrypoint": "app.py"}}}
    stack = plan_stack(data, [tmp_path], StackOptions(project="p"))
    manifests, _ = kubernetes_manifests(stack, IMAGES)
    policies = list(by_kind(manifests, "NetworkPolicy").values())
    pods = {m["metadata"]["name"]: {"namespace": "ns", "labels": m["spec"]["template"]["metadata"]["labels"]}
            for m in manifests if m["kind"] in ("Deployment", "Job")}
    assert stack.sandboxes is not None
    sandboxes = {}
    for server in stack.sandboxes.servers:
        config = container_config("p", server.policy.model_copy(update={"image": "img"}), "img", engine_cpus=2)
        pod = pod_manifest(config, f"sbx-{server.service}", server.service)
        sandboxes[server.service] = {"namespace": "ns", "labels": pod["metadata"]["labels"]}
    kube_dns = {"namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}}
    proxy = "box-allowlist-egress-proxy"
    assert {"head", "plain", "sandbox-broker", "p-collector", "box-none", "box-internal", "box-egress",
            "box-allowlist", proxy} <= set(pods)

    # the evaluation is not vacuous: the project's own paths are open
    assert connects(policies, pods["p-collector"], pods["head"]) and connects(policies, pods["plain"], pods["head"])
    assert connects(policies, pods["box-internal"], pods["sandbox-broker"])
    assert not connects(policies, pods["plain"], pods["sandbox-broker"])
    for owner, sandbox in sandboxes.items():
        network = owner.removeprefix("box-")
        for name, pod in pods.items():  # no server, head, broker, collector answers a sandbox
            # but its proxy answers an allow-listed one
            assert connects(policies, sandbox, pod) == (network == "allowlist" and name == proxy), (owner, name)
            # only the owner reaches into its sandbox, and only when it has a network
            assert connects(policies, pod, sandbox) == (name == owner and network != "none"), (name, owner)
        for other_owner, other in sandboxes.items():
            assert other_owner == owner or not connects(policies, sandbox, other), (owner, other_owner)
        # an allow-listed pod resolves no names (it finds its proxy by the Service's variables)
        assert allowed(policies, "Egress", sandbox, kube_dns) == (network not in ("none", "allowlist"))
        (own,) = [policy["spec"] for policy in policies
                  if policy["spec"]["podSelector"]["matchLabels"].get("gym-compose.io/sandbox-owner") == owner]
        assert (own["egress"] == [{}]) == (network == "egress")  # egress: also the world outside the cluster
    # the proxy: nothing of the project answers it; it goes out anywhere (its filter decides)
    for name, pod in pods.items():
        assert name == proxy or not connects(policies, pods[proxy], pod), name
    assert allowed(policies, "Egress", pods[proxy], {"namespace": "elsewhere", "labels": {}})
    assert all(rule != {} for policy in policies for rule in policy["spec"].get("ingress") or [])  # none admits all
