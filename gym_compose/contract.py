"""The names the host and the containers must agree on, in one place.

The host side (plan, render, engine, the commands) writes them into compose files, labels and
environments; the runtime inside every container (`gym_compose.server`, `gym_compose.collect`)
reads them. Standard library only: this module ships in the base image, and nothing here may
import anything. Files that cannot import it (the healthcheck probe, the Dockerfiles, the
compose templates) repeat a literal, and `tests/unit/test_contract.py` checks each against this.
"""

from __future__ import annotations

# --- environment variables -----------------------------------------------------------------
CONFIG_DICT_ENV = "NEMO_GYM_CONFIG_DICT"  # the whole config as YAML (the in-network view)
CONFIG_PATH_ENV = "NEMO_GYM_CONFIG_PATH"  # this server's instance name; HEAD_INSTANCE for the head
BIND_HOST_ENV = "GYM_COMPOSE_BIND_HOST"  # address to bind (containers: every interface)
SERVER_DIR_ENV = "GYM_COMPOSE_SERVER_DIR"  # folder with the implementation's entrypoint
SECRETS_DIR_ENV = "GYM_COMPOSE_SECRETS_DIR"  # where `secret://NAME` values are read from
HEAD_VIEW_ENV = "GYM_COMPOSE_HEAD_VIEW"  # head only: the host view of the config it serves
LOG_LEVEL_ENV = "GYM_COMPOSE_LOG_LEVEL"
PROJECT_ENV = "GYM_COMPOSE_PROJECT"  # the collector: its project, named in its run-folder lock
# A server with several replicas (swarm, kubernetes): this replica's HOST:PORT as the others reach
# it (sessions are pinned to the replica that made them), and the session-cookie key they share.
REPLICA_ADDRESS_ENV = "GYM_COMPOSE_REPLICA_ADDRESS"
SESSION_KEY_FILE_ENV = "GYM_COMPOSE_SESSION_KEY_FILE"
FORWARDED_HEADER = "x-gym-compose-forwarded"  # a request one replica passed to its session's owner
SESSION_KEY_SECRET = "session_key"  # the secret holding that key: session_key.<service>
# head only: instances on the NeMo Gym runtime (comma-separated), ready once `GET /` answers at all
ROOT_READY_ENV = "GYM_COMPOSE_ROOT_READY_SERVERS"

# --- config: server types, roles, the head -------------------------------------------------
RESOURCES_SERVERS = "resources_servers"
MODELS = "responses_api_models"
AGENTS = "responses_api_agents"
ENVIRONMENT_SERVERS = "environment_servers"
SERVER_TYPES: tuple[str, ...] = (RESOURCES_SERVERS, AGENTS, MODELS, ENVIRONMENT_SERVERS)

HEAD_INSTANCE = "head_server"  # the head's key in the config (NeMo Gym's name)
HEAD_ROLE = "head"
ENGINE_ROLE = "engine"  # an inference engine from its own image (vLLM)
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
TIME_LEFT_HEADER = "x-gym-time-left"  # seconds a callee has; it gives its own callees less

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
