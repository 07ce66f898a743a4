"""The names the host and the containers must agree on, in one place.

The host side (plan, render, engine, the commands) writes them into compose files, manifests,
labels and environments; the runtime inside every container (`gym_compose.server`,
`gym_compose.collect`, the sandbox broker and client in `gym_compose.sandbox`) reads them.
Standard library only: this module ships in the base image, and nothing here may import anything.
Files that cannot import it (the healthcheck probe, the Dockerfiles, the compose templates) repeat
a literal, and `tests/unit/test_contract.py` checks each against this.
"""

from __future__ import annotations

import hashlib
import re

# --- environment variables -----------------------------------------------------------------
CONFIG_DICT_ENV = "NEMO_GYM_CONFIG_DICT"  # the whole config as YAML (the in-network view)
CONFIG_PATH_ENV = "NEMO_GYM_CONFIG_PATH"  # this server's instance name; HEAD_INSTANCE for the head
BIND_HOST_ENV = "GYM_COMPOSE_BIND_HOST"  # address to bind (containers: every interface)
SERVER_DIR_ENV = "GYM_COMPOSE_SERVER_DIR"  # folder with the implementation's entrypoint
SECRETS_DIR_ENV = "GYM_COMPOSE_SECRETS_DIR"  # where `secret://NAME` values are read from
HEAD_VIEW_ENV = "GYM_COMPOSE_HEAD_VIEW"  # head only: the host view of the config it serves
LOG_LEVEL_ENV = "GYM_COMPOSE_LOG_LEVEL"
# The local-process target: the number of an inherited file descriptor that is a socket already
# bound to the server's port and listening; the server accepts on it instead of binding its own.
LISTEN_FD_ENV = "GYM_COMPOSE_LISTEN_FD"
PROJECT_ENV = "GYM_COMPOSE_PROJECT"  # the collector: its project, named in its run-folder lock
# A server with several replicas (swarm, kubernetes): this replica's HOST:PORT as the others reach
# it (sessions are pinned to the replica that made them), and the session-cookie key they share.
REPLICA_ADDRESS_ENV = "GYM_COMPOSE_REPLICA_ADDRESS"
SESSION_KEY_FILE_ENV = "GYM_COMPOSE_SESSION_KEY_FILE"
FORWARDED_HEADER = "x-gym-compose-forwarded"  # a request one replica passed to its session's owner
SESSION_KEY_SECRET = "session_key"  # the secret holding that key: session_key.<service>
# head only: instances on the NeMo Gym runtime (comma-separated), ready once `GET /` answers at all
ROOT_READY_ENV = "GYM_COMPOSE_ROOT_READY_SERVERS"
# What a lean server image adds when an instance sets `expose_tools_over_mcp: true` (the official MCP
# SDK, NeMo Gym 0.7's range): gym_compose.server.mcp_exposure serves /mcp with it.
MCP_REQUIREMENT = "mcp>=1.28.1,<2"

# --- config: server types, roles, the head -------------------------------------------------
RESOURCES_SERVERS = "resources_servers"
MODELS = "responses_api_models"
AGENTS = "responses_api_agents"
ENVIRONMENT_SERVERS = "environment_servers"
SERVER_TYPES: tuple[str, ...] = (RESOURCES_SERVERS, AGENTS, MODELS, ENVIRONMENT_SERVERS)

HEAD_INSTANCE = "head_server"  # the head's key in the config (NeMo Gym's name)
HEAD_ROLE = "head"
INFERENCE_ROLE = "engine"  # an inference server from its own image (vLLM); the role keeps its name in files
COLLECTOR_ROLE = "collector"
ROLE_BY_SERVER_TYPE: dict[str, str] = {
    ENVIRONMENT_SERVERS: "environment",
    AGENTS: "agent",
    MODELS: "model",
    RESOURCES_SERVERS: "resources",
}

SECRET_PREFIX = "secret://"  # a config value that names a secret file instead of holding it

# --- network --------------------------------------------------------------------------------
SERVER_PORT = 8000  # every server, inside the project network
HEAD_PORT = 11000  # the head, inside the network and (by default) published on the host
BIND_ALL = "0.0.0.0"
READY_PATH = "/_gym_compose/ready"  # 200 once the server (the head: every server) is ready
# model servers with late-bound upstreams: GET the base URLs, PUT {"base_url": [...]} to replace them
UPSTREAMS_PATH = "/_gym_compose/upstreams"
TIME_LEFT_HEADER = "x-gym-time-left"  # seconds a callee has; it gives its own callees less
# RUN/TASK/ROLLOUT of the collector's rollout a request serves, handed down every hop (checkpoints)
ROLLOUT_HEADER = "x-gym-rollout"

# --- containers -----------------------------------------------------------------------------
SERVER_UID = 10001  # the base image's unprivileged `server` user (and group)
SERVER_USER = f"{SERVER_UID}:{SERVER_UID}"
RUNTIME_ROOT = "/opt/gym-compose"  # the gym_compose package inside the base image
CONTAINER_WORK_ROOT = "/tmp/nemo_gym"  # writable in every (read-only) server container
CONTAINER_CACHE_DIR = CONTAINER_WORK_ROOT + "/cache"  # the run-level cache_dir inside containers
HEALTHCHECK_SCRIPT = f"{RUNTIME_ROOT}/gym_compose/server/healthcheck.sh"  # run by bash, no interpreter
SERVER_DIR = "/srv/server"  # a server image's implementation folder
NEMO_GYM_SEARCH_ROOT = "/srv/gym"  # NeMo Gym runtime images: <server_type>/<name>/, as in a checkout
SECRETS_DIR = "/run/secrets"  # where compose mounts secrets
COLLECTOR_INPUT = "/input/rows.jsonl"  # the collector's rows (read-only)
COLLECTOR_RESULTS = "/results"  # the run folder, as the collector sees it

# --- servers that share a network with their sandboxes (gym_compose/server/netguard.py) -----
SERVER_COMMAND = ("python", "-m", "gym_compose.server")  # the base image's CMD (docker/base.changes)
NEMO_GYM_SERVER_COMMAND = ("python", "-m", "gym_compose.server.nemo_gym_launch")  # the NeMo Gym runtime's CMD
NETGUARD_COMMAND = ("python", "-m", "gym_compose.server.netguard")  # wraps a server command
SANDBOX_SIDE_ALIAS = "gym-compose-sandbox-side"  # a server's alias on its sandbox network only
# what the guard needs before it drops them: the rules (NET_ADMIN), the bounding set (SETPCAP), the
# user (SETUID, SETGID); its Swarm helper stops a server whose side it cannot close (KILL)
NETGUARD_CAPABILITIES = ("KILL", "NET_ADMIN", "SETGID", "SETPCAP", "SETUID")

# --- labels on every container, network and volume ------------------------------------------
LABEL_PREFIX = "io.gym-compose"
PROJECT_LABEL = f"{LABEL_PREFIX}.project"
ROLE_LABEL = f"{LABEL_PREFIX}.role"
INSTANCE_LABEL = f"{LABEL_PREFIX}.instance"
RUNTIME_LABEL = f"{LABEL_PREFIX}.runtime"  # lean | nemo_gym: which runtime a server container runs
IMAGE_LABEL = f"{LABEL_PREFIX}.image"
CACHE_LABEL = f"{LABEL_PREFIX}.cache"

# --- sandboxes: the broker, the servers that lease from it, the sandboxes it starts -----------
SANDBOX_BROKER_PORT = 8000  # the broker, inside the project network
SANDBOX_BROKER_PORT_ENV = "GYM_COMPOSE_SANDBOX_BROKER_PORT"  # the broker: the port it binds
SANDBOX_POLICY_ENV = "GYM_COMPOSE_SANDBOX_POLICY"  # the broker: the plan's BrokerSettings as JSON
SANDBOX_BACKEND_ENV = "GYM_COMPOSE_SANDBOX_BACKEND"  # the broker: docker (compose, swarm) | kubernetes
SANDBOX_OWNERS_ENV = "GYM_COMPOSE_SANDBOX_OWNERS"  # the broker on Kubernetes: JSON server instance -> service
SANDBOX_BROKER_SECRET = "sandbox_broker_token"  # the broker's secret: the project secret
SANDBOX_BROKER_ENV = "GYM_COMPOSE_SANDBOX_BROKER"  # a server that leases: the broker's URL
SANDBOX_TOKEN_FILE_ENV = "GYM_COMPOSE_SANDBOX_TOKEN_FILE"  # a server that leases: its token's file
SANDBOX_REGISTRY_AUTH_SECRET = "sandbox_registry_auth"  # the broker's: JSON registry -> {username, password}
# The broker logs this line once per task image it pulled; `down --images` reads its log for them.
BROKER_PULLED_LINE = "pulled {image} in {seconds:.1f} s"
BROKER_PULLED_PATTERN = r"(?:^|\s)pulled (\S+) in \d+\.\d s$"  # BROKER_PULLED_LINE, read back (re.MULTILINE)
SANDBOX_LABEL = f"{LABEL_PREFIX}.sandbox"  # on every sandbox container
SANDBOX_SERVER_LABEL = f"{LABEL_PREFIX}.sandbox.server"  # the server instance a sandbox serves
SANDBOX_PHASE_LABEL = f"{LABEL_PREFIX}.sandbox.phase"  # an allow-listed sandbox's egress phase at its start
EGRESS_DEFAULT_PHASE = "default"  # the phase of `network.egress.allow`, the one a sandbox starts in
SNAPSHOT_LABEL = f"{LABEL_PREFIX}.snapshot"  # on every sandbox snapshot image (its snapshot id); `down` removes them
# Kubernetes labels the manifests and the broker's sandbox pods share
KUBERNETES_PART_OF = "app.kubernetes.io/part-of"
KUBERNETES_ROLE_LABEL = "gym-compose.io/role"
KUBERNETES_SANDBOX_OWNER_LABEL = "gym-compose.io/sandbox-owner"  # on a sandbox pod: the server service it serves
KUBERNETES_SANDBOX_PHASE_LABEL = "gym-compose.io/sandbox-phase"  # an allow-listed sandbox pod's egress phase now
KUBERNETES_SANDBOX_ROLE = "sandbox"


# Generated names that fit every target's limits by themselves (the broker names its sandboxes
# with them too).
#
# Generated names that fit every target's limits by themselves.
#
# A server's service name is a host name on the stack's network (one DNS label: 63 characters),
# and each target builds longer names from it and the project name:
#
# - compose: the container `PROJECT-SERVICE-1` (also a DNS alias on the network);
# - Swarm: the service `PROJECT_SERVICE` (at most 63 characters; its tasks `PROJECT_SERVICE.N.ID`
#   resolve on the network), secrets `PROJECT_KEY` (at most 64);
# - Kubernetes: the Service and Deployment `SERVICE` (a DNS label), label values (63), other
#   objects `PROJECT-...` (the Job's name is a label value too: 63; the rest 253).
#
# So a service name gets `service_budget(project)` characters: what is left of 63 once
# `PROJECT-` and `-1` are around it. A name longer than its budget keeps its first characters and
# ends in a hash of the whole original name (`shortened`): the same input always gives the same
# name, and two different inputs stay different. The full instance name stays in the instance label
# (`io.gym-compose.instance`; a Kubernetes annotation) and `gym-compose ps` shows it.
#
# Standard library only: the sandbox broker (inside its container) names its sandboxes with it too.

DNS_LABEL = 63  # RFC 1035: one label of a host name; also a Swarm service, a Kubernetes label value
SWARM_SECRET = 64  # a Swarm secret or config name, its stack prefix included
HASH_CHARS = 8
REPLICA_SUFFIX = "-1"  # compose's container name ends in the replica's number
LONGEST_FIXED_SERVICE = "sandbox-broker"  # the longest service name gym-compose itself gives
# A project name must leave the longest fixed service name its whole budget.
MAX_PROJECT = DNS_LABEL - len("-") - len(REPLICA_SUFFIX) - len(LONGEST_FIXED_SERVICE)


def dns_safe(name: str) -> str:
    """Lower case letters, digits and single `-` (other characters become `-`); may be empty."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


def shortened(name: str, limit: int, original: str | None = None) -> str:
    """`name` if it has at most `limit` characters, else its start, `-` and a hash of `original`
    (default: `name`) in exactly `limit` characters."""
    if len(name) <= limit:
        return name
    if limit < HASH_CHARS + 2:
        raise ValueError(f"no name fits in {limit} characters")
    digest = hashlib.sha256((original if original is not None else name).encode()).hexdigest()[:HASH_CHARS]
    start = name[:limit - HASH_CHARS - 1].rstrip("-_.")
    return f"{start}-{digest}" if start else digest


def service_budget(project: str) -> int:
    """Characters a service name of `project` may have: `PROJECT-SERVICE-1` in one DNS label."""
    return min(DNS_LABEL, DNS_LABEL - len(project) - len("-") - len(REPLICA_SUFFIX))


def project_too_long(project: str) -> str | None:
    """Why `project` leaves too little room for service names, or None when it does not."""
    if len(project) <= MAX_PROJECT:
        return None
    return (f"project name {project!r} has {len(project)} characters, too many for the names made from it: a "
            f"container is PROJECT-SERVICE-1 and a Swarm service PROJECT_SERVICE, each at most {DNS_LABEL} "
            f"characters (a DNS label), which leaves {max(service_budget(project), 0)} for the service "
            f"{LONGEST_FIXED_SERVICE!r} of {len(LONGEST_FIXED_SERVICE)}")


def was_shortened(service: str, instance: str) -> bool:
    """Whether `service` is not simply the instance name made DNS-safe (then `ps` shows the instance)."""
    return service != dns_safe(instance)


# Which registry an image reference names (Docker's rule): the first path component when it looks
# like a host (a dot, a port, `localhost`), else Docker Hub. The host writes the broker's registry
# credentials by it and the broker picks them by it.
DOCKER_HUB = "docker.io"
DOCKER_HUB_ALIASES = ("docker.io", "index.docker.io", "registry-1.docker.io")


def image_registry(image: str) -> str:
    """`127.0.0.1:5000/swe/sweap-images:tag` -> `127.0.0.1:5000`; `jefzda/sweap-images:t` -> `docker.io`."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return DOCKER_HUB if first in DOCKER_HUB_ALIASES else first
    return DOCKER_HUB
