"""Rollouts through NeMo Gym 0.7's own client, as NeMo RL collects them; run by NeMo Gym's Python:

    NEMO_GYM_VENV/bin/python -I tests/support/nemo_gym_run_examples.py ROWS.jsonl HEAD_HOST HEAD_PORT OUT.jsonl

`RolloutCollectionHelper().run_examples(examples, head_server_config=BaseServerConfig(host, port))`,
awaited together (NeMo RL's `NemoGym.run_rollouts`, REFERENCE.md "Trainers"): the client reads the
head's config and posts each row's `/run`. Writes one result per line, in the rows' order.
Standalone (standard library and nemo_gym only): it runs in NeMo Gym's venv, not this project's;
`-I` keeps this folder (whose nemo_gym.py would shadow the package) off sys.path.
"""

import asyncio
import json
import sys


async def main(rows_path: str, host: str, port: int, out_path: str) -> None:
    from nemo_gym.rollout_collection import RolloutCollectionHelper
    from nemo_gym.server_utils import BaseServerConfig

    with open(rows_path) as source:
        examples = [json.loads(line) for line in source if line.strip()]
    helper = RolloutCollectionHelper()
    pairs = await asyncio.gather(*helper.run_examples(examples=examples,
                                                      head_server_config=BaseServerConfig(host=host, port=port)))
    with open(out_path, "w") as out:
        for _row, result in pairs:
            out.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
