"""gym-compose as a library: start a stack, collect rollouts from it, hand it to a trainer.

    from gym_compose.api import Stack

    with Stack.from_configs(resources_servers=["example_single_tool_call"]) as stack:
        stack.set_model_urls("policy_model", ["http://10.0.0.5:8000/v1"])   # vllm_model only
        async for row in stack.rollouts(rows, parallel=32):                  # failures are rows too
            ...
        print(stack.aggregate_metrics(finished))

`RunHelper` and `GlobalConfigDictParserConfig` take the place of NeMo Gym's (`nemo_gym.cli`,
`nemo_gym.global_config`) for trainers that start Gym in-process (NeMo RL, veRL): the same calls,
the servers in containers. A thin façade over the layers the CLI uses (docs/training.md).
"""

from gym_compose.api.rollouts import is_failure
from gym_compose.api.run_helper import GlobalConfigDictParserConfig, RunHelper
from gym_compose.api.stack import Stack

__all__ = ["GlobalConfigDictParserConfig", "RunHelper", "Stack", "is_failure"]
