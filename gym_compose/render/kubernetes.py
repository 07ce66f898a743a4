"""Render a `Stack` as Kubernetes manifests: the kubernetes target's renderer (pure; no cluster).

The same plan as the compose project, in Kubernetes' words:

- per server a Deployment (its `replicas`) and a ClusterIP Service named like the compose service,
  so the in-network config (host = service name, port 8000; the head 11000) holds unchanged;
- probes from the servers' readiness route (`GET /_gym_compose/ready`): a startup probe that
  allows the compose start period, a readiness probe; liveness asks only whether the port
  answers (the head's readiness follows every server's, so a liveness on it would restart the
  head whenever any server restarts);
- limits as `resources.limits` (memory, cpu, `nvidia.com/gpu`), `reservations` as requests,
  `placement` `node.labels.K==V` as a nodeSelector, the compose hardening as a securityContext;
- the config views in a ConfigMap, the secrets in one Secret (each pod mounts only its own keys
  at /run/secrets, as compose does), in their own file;
- the collector as a Job (rows from a ConfigMap the user creates, results on a volume claim);
- NetworkPolicies for the compose networks' isolation, and for sandboxes the broker with a
  ServiceAccount whose Role reaches pods of its own namespace only, and per server whose sandboxes
  have an egress allow-list its proxy's Deployment and Service.
"""

from __future__ import annotations

import json
import re
import secrets as random_secrets
from pathlib import Path
from typing import Any

import yaml

from gym_compose.contract import (
    BIND_ALL,
    BIND_HOST_ENV,
    COLLECTOR_INPUT,
    COLLECTOR_RESULTS,
    COLLECTOR_ROLE,
    CONFIG_DICT_ENV,
    CONFIG_PATH_ENV,
    HEAD_INSTANCE,
    HEAD_PORT,
    HEAD_ROLE,
    HEAD_VIEW_ENV,
    HEALTHCHECK_SCRIPT,
    INFERENCE_ROLE,
    PROJECT_ENV,
    READY_PATH,
    REPLICA_ADDRESS_ENV,
    SANDBOX_BACKEND_ENV,
    SANDBOX_OWNERS_ENV,
    SECRETS_DIR,
    SERVER_UID,
    SESSION_KEY_FILE_ENV,
)
from gym_compose.contract import KUBERNETES_PART_OF as PART_OF
from gym_compose.contract import KUBERNETES_ROLE_LABEL as ROLE_LABEL
from gym_compose.contract import KUBERNETES_SANDBOX_OWNER_LABEL as SANDBOX_OWNER_LABEL
from gym_compose.contract import KUBERNETES_SANDBOX_PHASE_LABEL as SANDBOX_PHASE_LABEL
from gym_compose.contract import KUBERNETES_SANDBOX_ROLE as SANDBOX_ROLE
from gym_compose.errors import UserError
from gym_compose.plan.model import COLLECTOR_SERVICE, HEAD_SERVICE, Service, Stack, session_key_secret
from gym_compose.plan.service_spec import GpuRequest, Probe
from gym_compose.render.compose import _start_period_seconds
from gym_compose.render.templates import load_template

MANIFESTS_FILE = "stack.yaml"
SECRETS_FILE = "secrets.yaml"
NAME_LABEL = "app.kubernetes.io/name"
IN_NETWORK_LABEL = "gym-compose.io/network"  # on the project network (compose's `gym`)
SANDBOX_CLIENT_LABEL = "gym-compose.io/sandbox-client"  # a server that leases sandboxes
INSTANCE_ANNOTATION = "gym-compose.io/instance"  # a server's instance name in the config (contract.py)
GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
RESULTS_SIZE = "1Gi"
CACHE_SIZE = "100Gi"
PROBE_PERIOD_S = 2
HEAD_WAIT = (  # the Job's init container: the head's readiness route, with the probe's own code
    f"import sys,time;sys.path.insert(0,'{HEALTHCHECK_SCRIPT.rsplit('/', 1)[0]}');import healthcheck as h\n"
    f"while not h.is_ready({HEAD_PORT},'{HEAD_SERVICE}'):time.sleep(1)"
)


def kubernetes_manifests(stack: Stack, images: dict[str, str], project_secret: str | None = None
                         ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(the manifests but the Secret, the Secret or None). `images`: service name -> image (and "base")."""
    project = stack.project
    manifests: list[dict[str, Any]] = [_config_map(stack)]
    secret_data = dict(stack.secrets)
    sandbox_servers = {s.service: s for s in stack.sandboxes.servers} if stack.sandboxes else {}
    if stack.sandboxes is not None:
        from gym_compose.sandbox.tokens import BROKER_SECRET, server_secret_name, server_token

        project_secret = project_secret or random_secrets.token_hex(32)
        secret_data[BROKER_SECRET] = project_secret
        for server in stack.sandboxes.servers:
            secret_data[server_secret_name(server.instance)] = server_token(project_secret, server.instance)
    for service in stack.services:
        keys = list(service.secrets)
        if service.name in sandbox_servers:
            from gym_compose.sandbox.tokens import server_secret_name

            keys.append(server_secret_name(sandbox_servers[service.name].instance))
        manifests.append(_deployment(stack, service, images, keys, service.name in sandbox_servers))
        manifests.append(_service(project, service.name, service.port, service.role))
    for key, name in sorted(stack.volumes.items()):
        manifests.append(_claim(project, name, CACHE_SIZE, key))
    if stack.sandboxes is not None:
        manifests.extend(_sandbox_broker(stack, images))
        for server in stack.sandboxes.servers:
            for phase in server.egress_phases():
                if phase.proxy_service:
                    manifests.extend(_egress_proxy(project, phase.proxy_service, list(phase.hosts), images))
    manifests.append(_claim(project, f"{project}-results", RESULTS_SIZE, "results"))
    manifests.append(_collector_job(stack, images["base"]))
    manifests.extend(_network_policies(stack))
    secret = None
    if secret_data:
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                  "metadata": _meta(project, f"{project}-secrets"), "stringData": dict(sorted(secret_data.items()))}
    return manifests, secret


def write_manifests(stack: Stack, images: dict[str, str], out_dir: Path) -> Path:
    """DIR/stack.yaml and (0600) DIR/secrets.yaml; `kubectl apply -f DIR` applies both."""
    out_dir.mkdir(parents=True, exist_ok=True)
    secret_file = out_dir / SECRETS_FILE
    previous = _previous_project_secret(secret_file)
    manifests, secret = kubernetes_manifests(stack, images, previous)
    header = (f"# Rendered by gym-compose for Kubernetes: kubectl apply -n NAMESPACE -f {out_dir}\n"
              "# (images must be pullable by the cluster's nodes: render with --registry HOST/PREFIX)\n")
    (out_dir / MANIFESTS_FILE).write_text(header + dump_all(manifests), encoding="utf-8")
    if secret is not None:
        secret_file.touch(mode=0o600)
        secret_file.chmod(0o600)
        secret_file.write_text(dump_all([secret]), encoding="utf-8")
    else:
        secret_file.unlink(missing_ok=True)
    return out_dir / MANIFESTS_FILE


def dump_all(manifests: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(manifests, sort_keys=False, width=100)


def quantity(value: str | int | float, what: str) -> str:
    """A compose size (`512m`, `2g`, `1.5gb`, bytes) as a Kubernetes quantity (`512Mi`, `2Gi`)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(int(value))
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)b?\s*", str(value).lower())
    if not match:
        raise UserError(f"{what}: {value!r} is not a size", hint="e.g. 512m, 2g, or a number of bytes")
    number, unit = match.groups()
    return number + {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti"}[unit]


def _meta(project: str, name: str, role: str | None = None, service: str | None = None) -> dict[str, Any]:
    labels = {PART_OF: project}
    if service:
        labels[NAME_LABEL] = service
    if role:
        labels[ROLE_LABEL] = role
    return {"name": name, "labels": labels}


def _selector(project: str, service: str) -> dict[str, str]:
    return {PART_OF: project, NAME_LABEL: service}


def _config_map(stack: Stack) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(stack.project, f"{stack.project}-config"),
            "data": {"network.yaml": yaml.safe_dump(stack.network_config, sort_keys=False),
                     "host.yaml": yaml.safe_dump(stack.host_config, sort_keys=False)}}


def _config_env(project: str, key: str) -> dict[str, Any]:
    return {"configMapKeyRef": {"name": f"{project}-config", "key": key}}


def _resources(service: Service, default_memory: str | None) -> dict[str, Any]:
    where = f"{service.instance or service.name}.docker"
    limits: dict[str, Any] = {}
    memory = service.limits.memory if service.limits.memory is not None else default_memory
    if memory is not None:
        limits["memory"] = quantity(memory, f"{where}.memory")
    if service.limits.cpus is not None:
        limits["cpu"] = str(service.limits.cpus)
    if service.limits.gpus is not None:
        limits.update(_gpu_limit(service.limits.gpus, where))
    # Requests are what the scheduler sets aside: the config's `reservations`, else a small floor
    # (a limit with no request would reserve the whole limit). GPUs: request = limit, implied.
    requests: dict[str, Any] = {"memory": "64Mi"}
    if service.scheduling.reserve_memory is not None:
        requests["memory"] = quantity(service.scheduling.reserve_memory, f"{where}.reservations.memory")
    if service.scheduling.reserve_cpus is not None:
        requests["cpu"] = str(service.scheduling.reserve_cpus)
    elif "cpu" not in limits:
        requests["cpu"] = "50m"
    return {"requests": requests, "limits": limits}


def _gpu_limit(gpus: GpuRequest, where: str) -> dict[str, Any]:
    resource = GPU_RESOURCE.get(gpus.driver)
    if resource is None:
        raise UserError(f"{where}.gpus: driver {gpus.driver!r} has no Kubernetes device resource here",
                        hint=f"use one of: {', '.join(GPU_RESOURCE)}")
    if gpus.device_ids:
        raise UserError(f"{where}.gpus: Kubernetes schedules GPUs by count, not by device id",
                        hint=f"give a count, e.g. gpus: {len(gpus.device_ids)}")
    if not isinstance(gpus.count, int):
        raise UserError(f"{where}.gpus: Kubernetes needs a GPU count, got {gpus.count!r}",
                        hint="e.g. gpus: 1 (`all` has no meaning across a cluster's nodes)")
    return {resource: gpus.count}


def _node_selector(service: Service) -> dict[str, str]:
    selector = {}
    for constraint in service.scheduling.placement:
        match = re.fullmatch(r"node\.labels\.([A-Za-z0-9_./-]+)\s*==\s*(\S+)", constraint)
        if not match:
            raise UserError(f"{service.instance or service.name}.docker.placement: {constraint!r} has no "
                            "Kubernetes form", hint="only node.labels.KEY==VALUE maps (to a nodeSelector)")
        selector[match.group(1)] = match.group(2)
    return selector


def _security(service: Service, hardened: bool) -> dict[str, Any]:
    if not hardened:
        return {"allowPrivilegeEscalation": False}
    context: dict[str, Any] = {"runAsUser": SERVER_UID, "runAsGroup": SERVER_UID, "runAsNonRoot": True,
                               "readOnlyRootFilesystem": service.overrides.read_only is not False,
                               "allowPrivilegeEscalation": False,
                               "capabilities": {"drop": ["ALL"], **({"add": list(service.overrides.cap_add)}
                                                                    if service.overrides.cap_add else {})}}
    if service.overrides.user is not None:
        uid, _, gid = str(service.overrides.user).partition(":")
        if not uid.isdigit() or (gid and not gid.isdigit()):
            raise UserError(f"{service.instance}.docker.user: Kubernetes needs numeric ids, "
                            f"got {service.overrides.user!r}",
                            hint="e.g. user: \"10001:10001\"")
        context["runAsUser"] = int(uid)
        context["runAsNonRoot"] = int(uid) != 0
        if gid:
            context["runAsGroup"] = int(gid)
    return context


def _probes(service: Service, start_period_s: int) -> dict[str, Any]:
    http = {"httpGet": {"path": READY_PATH, "port": service.port}}
    return {
        "startupProbe": {**http, "periodSeconds": PROBE_PERIOD_S, "timeoutSeconds": 5,
                         "failureThreshold": max(1, start_period_s // PROBE_PERIOD_S)},
        "readinessProbe": {**http, "periodSeconds": PROBE_PERIOD_S, "timeoutSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"tcpSocket": {"port": service.port}, "periodSeconds": 10, "timeoutSeconds": 5,
                          "failureThreshold": 3},
    }


def _exec_probes(probe: Probe) -> dict[str, Any]:
    command = {"exec": {"command": list(probe.command)}}
    return {
        "startupProbe": {**command, "periodSeconds": probe.interval_s, "timeoutSeconds": probe.timeout_s,
                         "failureThreshold": max(1, probe.start_period_s // max(1, probe.interval_s))},
        "readinessProbe": {**command, "periodSeconds": probe.interval_s, "timeoutSeconds": probe.timeout_s,
                           "failureThreshold": probe.retries},
    }


def _deployment(stack: Stack, service: Service, images: dict[str, str], secret_keys: list[str],
                leases_sandboxes: bool) -> dict[str, Any]:
    project = stack.project
    engine = service.role == INFERENCE_ROLE
    env: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    image = images.get(service.name, service.image or images["base"])
    container: dict[str, Any] = {"name": service.name, "image": image,
                                 "imagePullPolicy": "IfNotPresent",
                                 "ports": [{"name": "http", "containerPort": service.port}]}
    if engine:
        if service.command:
            container["args"] = list(service.command)
        if service.probe is not None:
            container.update(_exec_probes(service.probe))
    else:
        env += [{"name": CONFIG_DICT_ENV, "valueFrom": _config_env(project, "network.yaml")},
                {"name": CONFIG_PATH_ENV, "value": service.instance or HEAD_INSTANCE},
                {"name": BIND_HOST_ENV, "value": BIND_ALL}]
        if service.role == HEAD_ROLE:
            env.append({"name": HEAD_VIEW_ENV, "valueFrom": _config_env(project, "host.yaml")})
        if service.scheduling.replicas > 1:  # sessions stay on the pod that made them (docs/deploy.md)
            env += [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": REPLICA_ADDRESS_ENV, "value": f"$(POD_IP):{service.port}"},
                    {"name": SESSION_KEY_FILE_ENV, "value": f"{SECRETS_DIR}/{session_key_secret(service.name)}"}]
        container.update(_probes(service, _start_period_seconds(stack, service)))
        volumes.append({"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}})
        mounts.append({"name": "tmp", "mountPath": "/tmp"})
    if leases_sandboxes:
        from gym_compose.contract import SANDBOX_BROKER_ENV as BROKER_ENV
        from gym_compose.contract import SANDBOX_TOKEN_FILE_ENV as TOKEN_FILE_ENV
        from gym_compose.plan.sandbox_names import BROKER_PORT, BROKER_SERVICE
        from gym_compose.sandbox.tokens import server_secret_name

        assert stack.sandboxes is not None
        owner = next(s for s in stack.sandboxes.servers if s.service == service.name)
        env += [{"name": BROKER_ENV, "value": f"http://{BROKER_SERVICE}:{BROKER_PORT}"},
                {"name": TOKEN_FILE_ENV, "value": f"{SECRETS_DIR}/{server_secret_name(owner.instance)}"}]
    env += [{"name": key, "value": value} for key, value in service.overrides.environment.items()]
    if secret_keys:
        volumes.append({"name": "secrets", "secret": {"secretName": f"{project}-secrets", "defaultMode": 0o444,
                                                      "items": [{"key": k, "path": k} for k in sorted(secret_keys)]}})
        mounts.append({"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True})
    if service.limits.shm is not None:
        shm = quantity(service.limits.shm, f"{service.name}.shm_size")
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}})
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    for index, mount in enumerate(service.mounts):
        name = f"mount-{index}"
        if mount.kind == "volume":
            claim = stack.volumes.get(mount.source, mount.source)
            volumes.append({"name": name, "persistentVolumeClaim": {"claimName": claim}})
        else:
            volumes.append({"name": name, "hostPath": {"path": mount.source}})
        mounts.append({"name": name, "mountPath": mount.target, **({"readOnly": True} if mount.read_only else {})})
    if service.overrides.volumes:
        raise UserError(f"{service.instance}.docker.volumes: compose volumes have no Kubernetes form here",
                        hint="mount data through the image, or render for compose/swarm")
    if env:
        container["env"] = env
    if mounts:
        container["volumeMounts"] = mounts
    container["resources"] = _resources(service, None if engine else _default_memory(service))
    container["securityContext"] = _security(service, hardened=not engine)
    labels = _meta(project, service.name, service.role, service.name)["labels"]
    if service.role != INFERENCE_ROLE:
        labels[IN_NETWORK_LABEL] = "true"
    if leases_sandboxes:
        labels[SANDBOX_CLIENT_LABEL] = "true"
    pod_spec: dict[str, Any] = {"automountServiceAccountToken": False, "enableServiceLinks": False,
                                "terminationGracePeriodSeconds": 30 if engine else 5,
                                "containers": [container], **({"volumes": volumes} if volumes else {})}
    if service.host_ipc:
        pod_spec["hostIPC"] = True
    selector = _node_selector(service)
    if selector:
        pod_spec["nodeSelector"] = selector
    metadata = _meta(project, service.name, service.role, service.name)
    template_metadata: dict[str, Any] = {"labels": labels}
    if service.instance:  # the whole instance name: a label value has at most 63 characters, an annotation any
        metadata["annotations"] = template_metadata["annotations"] = {INSTANCE_ANNOTATION: service.instance}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
            "spec": {"replicas": service.scheduling.replicas,
                     "selector": {"matchLabels": _selector(project, service.name)},
                     "template": {"metadata": template_metadata, "spec": pod_spec}}}


def _default_memory(service: Service) -> str | None:
    """The compose target's default for the same service: its role's, or the NeMo Gym runtime's."""
    from gym_compose.plan.runtime_choice import NEMO_GYM
    from gym_compose.render.compose import NEMO_GYM_LIMITS
    from gym_compose.render.templates import role_defaults

    if service.runtime == NEMO_GYM:
        return str(NEMO_GYM_LIMITS["mem_limit"])
    return role_defaults(service.role).get("mem_limit") or load_template("server").get("mem_limit")


def _service(project: str, name: str, port: int, role: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(project, name, role, name),
            "spec": {"type": "ClusterIP", "selector": _selector(project, name),
                     "ports": [{"name": "http", "port": port, "targetPort": port}]}}


def _claim(project: str, name: str, size: str, purpose: str) -> dict[str, Any]:
    meta = _meta(project, name)
    meta["labels"]["gym-compose.io/volume"] = purpose
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}}


def _collector_job(stack: Stack, base_image: str) -> dict[str, Any]:
    project = stack.project
    template = load_template("collector")
    security = {"runAsUser": SERVER_UID, "runAsGroup": SERVER_UID, "runAsNonRoot": True,
                "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    container = {
        "name": COLLECTOR_SERVICE, "image": base_image, "imagePullPolicy": "IfNotPresent",
        "command": list(template["entrypoint"]),
        "args": ["--input", COLLECTOR_INPUT, "--output-dir", COLLECTOR_RESULTS],
        "env": [{"name": CONFIG_DICT_ENV, "valueFrom": _config_env(project, "network.yaml")},
                {"name": PROJECT_ENV, "value": project}],
        "volumeMounts": [{"name": "input", "mountPath": COLLECTOR_INPUT.rsplit("/", 1)[0], "readOnly": True},
                         {"name": "results", "mountPath": COLLECTOR_RESULTS},
                         {"name": "tmp", "mountPath": "/tmp"}],
        "resources": {"requests": {"memory": "128Mi", "cpu": "100m"},
                      "limits": {"memory": quantity(template["mem_limit"], "collector.mem_limit")}},
        "securityContext": security,
    }
    wait_for_head = {"name": "wait-for-head", "image": base_image, "imagePullPolicy": "IfNotPresent",
                     "command": ["python", "-I", "-S", "-c", HEAD_WAIT], "securityContext": security,
                     "resources": {"requests": {"memory": "32Mi", "cpu": "10m"}, "limits": {"memory": "64Mi"}}}
    labels = _meta(project, COLLECTOR_SERVICE, COLLECTOR_ROLE, COLLECTOR_SERVICE)["labels"]
    labels[IN_NETWORK_LABEL] = "true"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": _meta(project, f"{project}-{COLLECTOR_SERVICE}", COLLECTOR_ROLE, COLLECTOR_SERVICE),
            "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": {
                "restartPolicy": "Never", "automountServiceAccountToken": False, "enableServiceLinks": False,
                "securityContext": {"fsGroup": SERVER_UID},
                "initContainers": [wait_for_head], "containers": [container],
                "volumes": [{"name": "input", "configMap": {"name": f"{project}-input"}},
                            {"name": "results", "persistentVolumeClaim": {"claimName": f"{project}-results"}},
                            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}]}}}}


def _sandbox_broker(stack: Stack, images: dict[str, str]) -> list[dict[str, Any]]:
    """The broker's Deployment and Service, and the only ServiceAccount with rights: pods (and their
    exec, attach, log) in this namespace, nothing else."""
    from gym_compose.contract import SANDBOX_POLICY_ENV as POLICY_ENV
    from gym_compose.plan.sandbox_names import BROKER_PORT, BROKER_SERVICE
    from gym_compose.render.sandbox_services import broker_settings
    from gym_compose.sandbox.tokens import BROKER_SECRET

    project = stack.project
    account = f"{project}-{BROKER_SERVICE}"
    settings = broker_settings(stack, images)
    for server in stack.sandboxes.servers if stack.sandboxes else []:
        if server.proxy_service:  # allow-listed pods resolve no names (pod.py): the proxy by its service links
            from gym_compose.render.egress_proxy import service_link_url

            policy = settings.servers[server.instance]
            policy.proxy_url = service_link_url(server.proxy_service)
            policy.phase_proxy_urls = {phase.phase: service_link_url(phase.proxy_service)
                                       for phase in server.named_egress_phases() if phase.proxy_service}
    broker = Service(name=BROKER_SERVICE, role="sandbox-broker", port=BROKER_PORT)
    # a sandbox pod's owner label is its server's service, which the NetworkPolicies select
    owners = {server.policy.server: server.service for server in (stack.sandboxes.servers if stack.sandboxes else [])}
    container: dict[str, Any] = {
        "name": BROKER_SERVICE, "image": images.get(BROKER_SERVICE, images["base"]), "imagePullPolicy": "IfNotPresent",
        "command": list(load_template("sandbox_broker")["entrypoint"]),
        "ports": [{"name": "http", "containerPort": BROKER_PORT}],
        "env": [{"name": POLICY_ENV, "value": json.dumps(settings.model_dump(mode="json"), separators=(",", ":"))},
                {"name": BIND_HOST_ENV, "value": BIND_ALL},
                {"name": SANDBOX_BACKEND_ENV, "value": "kubernetes"},
                {"name": SANDBOX_OWNERS_ENV, "value": json.dumps(owners, separators=(",", ":"))}],
        "volumeMounts": [{"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}],
        "resources": {"requests": {"memory": "128Mi", "cpu": "50m"},
                      "limits": {"memory": quantity(load_template("sandbox_broker")["mem_limit"], "broker")}},
        "securityContext": _security(broker, hardened=True),
        **_probes(broker, 60),
    }
    labels = {**_meta(project, BROKER_SERVICE, "sandbox-broker", BROKER_SERVICE)["labels"]}
    rules = [{"apiGroups": [""], "resources": ["pods"],
              "verbs": ["get", "list", "watch", "create", "delete", "deletecollection", "patch"]},
             {"apiGroups": [""], "resources": ["pods/exec", "pods/attach", "pods/log"], "verbs": ["get", "create"]}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(project, account, "sandbox-broker"),
         "automountServiceAccountToken": False},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": _meta(project, account, "sandbox-broker"),
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": _meta(project, account, "sandbox-broker"),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
         "subjects": [{"kind": "ServiceAccount", "name": account}]},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": _meta(project, BROKER_SERVICE, "sandbox-broker", BROKER_SERVICE),
         "spec": {"replicas": 1, "selector": {"matchLabels": _selector(project, BROKER_SERVICE)},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "serviceAccountName": account, "automountServiceAccountToken": True, "enableServiceLinks": False,
                      "terminationGracePeriodSeconds": 10, "containers": [container],
                      "volumes": [{"name": "secrets", "secret": {
                                      "secretName": f"{project}-secrets", "defaultMode": 0o444,
                                      "items": [{"key": BROKER_SECRET, "path": BROKER_SECRET}]}},
                                  {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}]}}}},
        _service(project, BROKER_SERVICE, BROKER_PORT, "sandbox-broker"),
    ]


def _egress_proxy(project: str, name: str, hosts: list[str], images: dict[str, str]) -> list[dict[str, Any]]:
    """The Deployment and Service of a server's egress proxy (render/egress_proxy.py): the one peer
    its allow-listed sandbox pods may open connections to (the NetworkPolicies below)."""
    from gym_compose.render import egress_proxy

    uid, _, gid = egress_proxy.PROXY_USER.partition(":")
    port = egress_proxy.PROXY_PORT
    container = {
        "name": "egress-proxy", "image": images.get(egress_proxy.IMAGE_KEY, egress_proxy.IMAGE_KEY),
        "imagePullPolicy": "IfNotPresent", "command": egress_proxy.proxy_command(hosts),
        "ports": [{"name": "proxy", "containerPort": port}],
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        "resources": {"requests": {"memory": "16Mi", "cpu": "10m"}, "limits": {"memory": "128Mi"}},
        "securityContext": {"runAsUser": int(uid), "runAsGroup": int(gid), "runAsNonRoot": True,
                            "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
        "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": PROBE_PERIOD_S, "timeoutSeconds": 5},
        "livenessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 10, "timeoutSeconds": 5},
    }
    meta = _meta(project, name, egress_proxy.PROXY_ROLE, name)
    service = _service(project, name, port, egress_proxy.PROXY_ROLE)
    service["spec"]["ports"][0]["name"] = "proxy"
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {"replicas": 1, "selector": {"matchLabels": _selector(project, name)},
                  "template": {"metadata": {"labels": dict(meta["labels"])}, "spec": {
                      "automountServiceAccountToken": False, "enableServiceLinks": False,
                      "terminationGracePeriodSeconds": 5, "containers": [container],
                      "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                      "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "4Mi"}}]}}}},
        service,
    ]


def _network_policies(stack: Stack) -> list[dict[str, Any]]:
    """Compose's networks as policies: servers (and the collector) reach each other on the project
    network; only sandbox-leasing servers reach the broker (the internal control network). A
    sandbox pod admits connections from the server that leased it only, and may open none into
    the project: with `internal` it may ask DNS and nothing else, with `egress` also the world,
    with an allow-list its server's egress proxy alone (which admits that server's sandboxes only),
    where every pod of the project (servers, head, broker, engines, other sandboxes) is selected
    by an ingress policy that admits no sandbox pod. What the network guard does under compose
    and Swarm (gym_compose/server/netguard.py), the pods' policies do here (docs/sandboxes.md)."""
    project = stack.project

    def policy(name: str, selector: dict[str, str], types: list[str], **rules: Any) -> dict[str, Any]:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": _meta(project, f"{project}-{name}"),
                "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": types, **rules}}

    in_network = {PART_OF: project, IN_NETWORK_LABEL: "true"}
    from_network = [{"from": [{"podSelector": {"matchLabels": in_network}}]}]
    policies = [policy("project-network", in_network, ["Ingress"], ingress=from_network)]
    engines = [s for s in stack.services if s.role == INFERENCE_ROLE]
    for engine in engines:
        policies.append(policy(f"{engine.name}-ingress", _selector(project, engine.name), ["Ingress"],
                               ingress=from_network))
    if stack.sandboxes is None:
        return policies
    from gym_compose.plan.sandbox_names import BROKER_SERVICE

    clients = {PART_OF: project, SANDBOX_CLIENT_LABEL: "true"}
    policies.append(policy("sandbox-control", _selector(project, BROKER_SERVICE), ["Ingress"],
                           ingress=[{"from": [{"podSelector": {"matchLabels": clients}}]}]))
    dns = {"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
           "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    for server in stack.sandboxes.servers:
        sandboxes = {PART_OF: project, ROLE_LABEL: SANDBOX_ROLE, SANDBOX_OWNER_LABEL: server.service}
        owner = {"podSelector": {"matchLabels": _selector(project, server.service)}}
        if server.policy.network == "none":
            rules: dict[str, Any] = {"ingress": [], "egress": []}
        elif server.policy.network == "egress":
            rules = {"ingress": [{"from": [owner]}], "egress": [{}]}
        elif server.proxy_service:
            from gym_compose.render.egress_proxy import PROXY_PORT

            # no DNS: the pods resolve no names. With named phases, this policy lets them open
            # nothing, and each phase's own (they add up) lets its pods reach its proxy alone.
            phased = len(server.egress_phases()) > 1
            to_default: list[dict[str, Any]] = []
            for phase in server.egress_phases():
                in_phase = {**sandboxes, SANDBOX_PHASE_LABEL: phase.phase} if phased else sandboxes
                if phase.proxy_service is None:
                    continue  # a phase that names no host: the server's policy alone, no connection out
                proxy = _selector(project, phase.proxy_service)
                to_proxy = {"to": [{"podSelector": {"matchLabels": proxy}}],
                            "ports": [{"protocol": "TCP", "port": PROXY_PORT}]}
                if phased:
                    policies.append(policy(f"sandboxes-{server.service}-{phase.phase}", in_phase, ["Egress"],
                                           egress=[to_proxy]))
                else:
                    to_default = [to_proxy]
                # the proxy admits this server's sandboxes in its phase alone, and goes out anywhere
                # (its filter decides where; the project's pods admit no one outside their network)
                policies.append(policy(phase.proxy_service, proxy, ["Ingress", "Egress"],
                                       ingress=[{"from": [{"podSelector": {"matchLabels": in_phase}}],
                                                 "ports": [{"protocol": "TCP", "port": PROXY_PORT}]}],
                                       egress=[{}]))
            rules = {"ingress": [{"from": [owner]}], "egress": to_default}
        else:
            rules = {"ingress": [{"from": [owner]}], "egress": [dns]}
        policies.append(policy(f"sandboxes-{server.service}", sandboxes, ["Ingress", "Egress"], **rules))
    return policies


def _previous_project_secret(secret_file: Path) -> str | None:
    """Re-rendering keeps the sandbox project secret, so tokens of a running stack stay valid."""
    from gym_compose.sandbox.tokens import BROKER_SECRET

    if not secret_file.is_file():
        return None
    for document in yaml.safe_load_all(secret_file.read_text(encoding="utf-8")):
        value = ((document or {}).get("stringData") or {}).get(BROKER_SECRET)
        if value:
            return str(value)
    return None
