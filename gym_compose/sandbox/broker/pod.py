"""A sandbox as a Kubernetes pod: the Engine API body (launch.container_config, the one place the
policy becomes limits) translated to a Pod manifest, for the broker's Kubernetes backend.

The pod's labels are the ones the rendered NetworkPolicies select (render/kubernetes.py: role
`sandbox`, owner = the leasing server's service, and an allow-listed sandbox's egress phase), so
a sandbox's network is its policy's there too. What a pod has no field for: the pids limit (the
kubelet's podPidsLimit), the log driver (the agent's stream goes through the kubelet's attach;
its container log is what it writes).

Unlike Docker, Kubernetes attaches only to a running container and passes on only what is
written after: the launcher first waits for one line on stdin (which the broker sends once it is
attached), so the agent's hello cannot be lost.
"""

from __future__ import annotations

import re
from typing import Any

from gym_compose.contract import KUBERNETES_PART_OF as PART_OF
from gym_compose.contract import KUBERNETES_ROLE_LABEL as ROLE_LABEL
from gym_compose.contract import KUBERNETES_SANDBOX_OWNER_LABEL as SANDBOX_OWNER_LABEL
from gym_compose.contract import KUBERNETES_SANDBOX_PHASE_LABEL as SANDBOX_PHASE_LABEL
from gym_compose.contract import KUBERNETES_SANDBOX_ROLE as SANDBOX_ROLE
from gym_compose.contract import SANDBOX_PHASE_LABEL as DOCKER_PHASE_LABEL
from gym_compose.sandbox.policy import PROJECT_LABEL, SERVER_LABEL

SANDBOX_SERVER_ANNOTATION = "gym-compose.io/sandbox-server"
CONTAINER = "sandbox"
WAIT_FOR_ATTACH = "read -r _ || exit 0; "  # prefixed to the launcher: start once the broker is attached


def pod_name(container_name: str) -> str:
    """A DNS-1123 name from the Docker container name (lower case, `-` for `_` and `.`, 63 at most)."""
    name = re.sub(r"[^a-z0-9-]+", "-", container_name.lower()).strip("-")
    return name[:63].rstrip("-") or "sandbox"


def label_value(value: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", value)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)


def _memory(size_bytes: int) -> str:
    return f"{size_bytes // (1 << 20)}Mi" if size_bytes % (1 << 20) == 0 else str(size_bytes)


def _tmpfs_size(options: str) -> str | None:
    size = re.search(r"size=(\d+)([kmg]?)", options)
    if not size:
        return None
    return size.group(1) + {"": "", "k": "Ki", "m": "Mi", "g": "Gi"}[size.group(2)]


def pod_manifest(config: dict[str, Any], name: str, owner_service: str) -> dict[str, Any]:
    """The Pod for the sandbox container `config` (launch.container_config) named `name`."""
    host = config["HostConfig"]
    labels = config["Labels"]
    entrypoint = list(config["Entrypoint"])
    command = [entrypoint[0], entrypoint[1], WAIT_FOR_ATTACH + entrypoint[2], *entrypoint[3:]]
    memory = _memory(int(host["Memory"]))
    cpu = f"{max(1, int(host['NanoCpus']) // 1_000_000)}m"
    volumes, mounts = [], []
    for index, (path, options) in enumerate(sorted((host.get("Tmpfs") or {}).items())):
        empty_dir: dict[str, Any] = {"medium": "Memory"}
        size = _tmpfs_size(options)
        if size:
            empty_dir["sizeLimit"] = size
        volumes.append({"name": f"tmpfs-{index}", "emptyDir": empty_dir})
        mounts.append({"name": f"tmpfs-{index}", "mountPath": path})
    security: dict[str, Any] = {
        "privileged": False, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": bool(host.get("ReadonlyRootfs")),
        "capabilities": {"drop": ["ALL"], **({"add": list(host["CapAdd"])} if host.get("CapAdd") else {})},
    }
    user = str(config.get("User") or "")
    uid, _, gid = user.partition(":")
    if uid.isdigit():
        security["runAsUser"] = int(uid)
        if gid.isdigit():
            security["runAsGroup"] = int(gid)
    container: dict[str, Any] = {
        "name": CONTAINER, "image": config["Image"], "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": [{"name": key, "value": value} for key, value in
                (item.split("=", 1) for item in config.get("Env") or [])],
        "workingDir": config.get("WorkingDir") or None,
        "stdin": True, "stdinOnce": True, "tty": False,
        "resources": {"limits": {"memory": memory, "cpu": cpu}, "requests": {"memory": memory, "cpu": cpu}},
        "securityContext": security,
        "volumeMounts": mounts,
    }
    if container["workingDir"] is None:
        del container["workingDir"]
    # A sandbox that may resolve no names (an egress allow-list; launch.py) gets the same resolver
    # as under Docker, its own loopback where nothing answers; it finds its proxy by the Service's
    # environment variables instead (the env value names them: render/egress_proxy.service_link_url).
    dns: dict[str, Any] = {}
    if host.get("Dns"):
        dns = {"dnsPolicy": "None", "dnsConfig": {"nameservers": list(host["Dns"])}, "enableServiceLinks": True}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {PART_OF: label_value(labels[PROJECT_LABEL]), ROLE_LABEL: SANDBOX_ROLE,
                       SANDBOX_OWNER_LABEL: label_value(owner_service),
                       **({SANDBOX_PHASE_LABEL: label_value(labels[DOCKER_PHASE_LABEL])}
                          if DOCKER_PHASE_LABEL in labels else {})},
            "annotations": {SANDBOX_SERVER_ANNOTATION: labels[SERVER_LABEL], **{
                key: str(value) for key, value in labels.items() if key.startswith("io.gym-compose.sandbox.")}},
        },
        "spec": {
            "restartPolicy": "Never", "hostname": "sandbox", "automountServiceAccountToken": False,
            "enableServiceLinks": False, "terminationGracePeriodSeconds": 0,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container], "volumes": volumes, **dns,
        },
    }
