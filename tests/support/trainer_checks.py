"""What an RL trainer checks of a rollout row: token ids and log-probs on every model turn, and the
turns contiguous (each turn's prompt starts with everything the rollout saw so far).

The rule is NeMo RL's (`nemo_rl/environments/nemo_gym.py`, whose assertion reads "Non-contiguous
messages found!", as REFERENCE.md's trainer section records it); written here, not copied.
"""

from __future__ import annotations

import threading
from typing import Any

from tests.fakes.fake_vllm import make_server


def model_turns(rollout: dict[str, Any]) -> list[dict[str, Any]]:
    """The output items that carry a model turn's token ids, in order."""
    return [item for item in rollout["response"]["output"] if "generation_token_ids" in item]


def assert_trainable(rollout: dict[str, Any]) -> int:
    """Every model turn has prompt ids, generation ids and as many log-probs, and each turn's prompt
    begins with the previous turns' prompt and generation; returns the number of turns."""
    seen: list[int] = []
    turns = model_turns(rollout)
    assert turns, f"no output item carries token ids: {[i.get('type') for i in rollout['response']['output']]}"
    for number, item in enumerate(turns):
        prompt, generated, log_probs = item["prompt_token_ids"], item["generation_token_ids"], item["generation_log_probs"]
        assert prompt and generated and len(generated) == len(log_probs), f"turn {number}: token ids or log-probs missing"
        assert all(isinstance(p, float) for p in log_probs)
        assert prompt[: len(seen)] == seen, f"turn {number}: Non-contiguous messages found!"
        seen = prompt + generated
    return len(turns)


def start_fake_vllm(host: str = "127.0.0.1"):
    """A fake vLLM whose chat template renders a turn exactly as generated (contiguous prompts),
    serving in a thread; `.shutdown()` it. `host` 0.0.0.0: containers reach it as host.docker.internal."""
    server = make_server(0, host=host, call_marker="")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
