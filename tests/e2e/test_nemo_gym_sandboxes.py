"""A NeMo Gym server on the NeMo Gym runtime leases gym-compose sandboxes through NeMo Gym's own
provider registry (docs/nemo-gym-runtime.md#sandboxes): its config names NeMo Gym's `docker`
provider, as NeMo Gym's sandboxed servers do, and its verify runs code in a sandbox with the real
`nemo_gym.sandbox` API; the reward is 1 only when the provider was `gym_compose` and the code ran."""

from __future__ import annotations

import json

import pytest

from tests.support.e2e import BUILDS_NEMO_GYM_RUNTIME, free_port, gym_compose, labelled

pytestmark = [pytest.mark.docker, BUILDS_NEMO_GYM_RUNTIME]

APP = '''
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig, BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer,
)
from nemo_gym.global_config import get_global_config_dict
from nemo_gym.sandbox import AsyncSandbox, SandboxSpec, create_provider
from nemo_gym.sandbox.config import resolve_provider_config


class Config(BaseResourcesServerConfig):
    sandbox_provider: str


class Server(SimpleResourcesServer):
    config: Config

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        provider = create_provider(resolve_provider_config(self.config.sandbox_provider, get_global_config_dict()))
        sandbox = await AsyncSandbox(provider).start(SandboxSpec(files={"check.py": "print(6 * 7)"}))
        try:
            result = await sandbox.exec("python3 check.py")
        finally:
            await sandbox.stop()
        print("sandbox:", provider.name, result.return_code, repr(result.stdout), flush=True)
        ran = provider.name == "gym_compose" and (result.return_code, (result.stdout or "").strip()) == (0, "42")
        return BaseVerifyResponse(**body.model_dump(), reward=1.0 if ran else 0.0)


if __name__ == "__main__":
    Server.run_webserver()
'''

CONFIG = '''
sandboxed:
  resources_servers:
    sandboxed:
      entrypoint: app.py
      domain: coding
      sandbox_provider: sandbox
      docker:
        runtime: nemo_gym
sandboxed_simple_agent:
  responses_api_agents:
    simple_agent:
      entrypoint: app.py
      resources_server: {type: resources_servers, name: sandboxed}
      model_server: {type: responses_api_models, name: policy_model}
sandbox:            # NeMo Gym's docker provider block (providers/docker/configs/docker.yaml)
  default_metadata: {sandbox-api: docker-cli}
  docker:
    exec: {default_timeout_s: 180}
'''


def test_a_nemo_gym_server_gets_gym_compose_sandboxes_from_nemo_gyms_registry(project, tmp_path):  # noqa: F811
    root = tmp_path / "gym"
    server = root / "resources_servers" / "sandboxed"
    (server / "configs").mkdir(parents=True)
    (server / "app.py").write_text(APP)
    (server / "configs" / "sandboxed.yaml").write_text(CONFIG)
    rows = tmp_path / "rows.jsonl"
    row = {"responses_create_params": {"input": [{"role": "user", "content": "hi"}]},
           "agent_ref": {"type": "responses_api_agents", "name": "sandboxed_simple_agent"}}
    rows.write_text("\n".join(json.dumps(row) for _ in range(2)) + "\n")
    up = gym_compose("up", "-p", project, "--head-port", str(free_port()), "--search-dir", str(root),
                     "--resources-server", "sandboxed", "--input", str(rows), cwd=tmp_path, timeout=1800)
    output = up.stdout + up.stderr
    assert up.returncode == 0, output[-4000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    rewards = [json.loads(line)["reward"] for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert rewards == [1.0, 1.0], output[-4000:]
    assert "'docker'" in output and "runs as gym-compose sandboxes" in output
    assert labelled("container", project) == []
