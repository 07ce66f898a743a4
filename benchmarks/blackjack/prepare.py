"""Blackjack hands that perfect play wins: the blackjack gymnasium server's own game, dealt from
seeded decks (no outside data; the rows are this project's).

For each seed from 0 up, the hand is played through the server's real `reset`/`step` with every
line "hit N times, then stand" (N = 0..5), knowing the deck: a seed whose shortest winning line
exists becomes a row, with that line as `expected_actions` (what the mock model's oracle plays)
and `[hit]` as `wrong_actions` (the adversary hits until it busts). A model sees only its cards and the
dealer's up card, so the reward (+1 win, 0 push, -1 loss) measures how often it finds the win.

Row: `responses_create_params` (the game's instructions), `seed`, `expected_actions`,
`wrong_actions`. The benchmark ships 24 rows (data/blackjack_subset.jsonl, `--subset`); the
default writes 200 (data/blackjack_benchmark.jsonl).
"""

import asyncio
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))

from prepare_support import main  # noqa: E402

HIT, STAND = "<action>hit</action>", "<action>stand</action>"
MAX_HITS = 5
INSTRUCTIONS = [
    {"role": "system", "content": "We are playing blackjack. Answer each hand with <action>hit</action> or "
                                  "<action>stand</action>."},
    {"role": "user", "content": "Deal the cards."},
]


def reply(text: str) -> dict:
    return {"id": "r", "created_at": 0, "model": "prepare", "object": "response", "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "output": [
                {"type": "message", "id": "m", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": text, "annotations": []}]}]}


async def play(env, seed: int, line: list[str]) -> float:
    """The reward of playing `line` (then standing) on the hand of `seed`, through the server's game."""
    from gym_compose.server.responses_api import Response

    session = f"prepare-{seed}"
    await env.reset({"seed": seed}, session_id=session)
    reward = 0.0
    for action in line + [STAND] * 12:
        _, step_reward, terminated, truncated, _ = await env.step(Response.model_validate(reply(action)),
                                                                 {"seed": seed}, session_id=session)
        reward += step_reward
        if terminated or truncated:
            env.session_state.pop(session, None)
            return reward
    raise RuntimeError(f"seed {seed}: the hand did not end")


async def winnable_rows(count: int) -> list[dict]:
    from gym_compose.server.testing import load_app

    env = load_app(ROOT / "server_images" / "blackjack").BlackjackEnv(config={"name": "blackjack"})
    rows, seed = [], 0
    while len(rows) < count:
        lines = [[HIT] * hits + [STAND] for hits in range(MAX_HITS + 1)]
        winning = [line for line in lines if await play(env, seed, line) == 1.0]
        # the adversary hits every turn (the mock repeats a list's last item): kept if that busts
        # within the agent's 10 steps
        if winning and await play(env, seed, [HIT] * 10) == -1.0:
            rows.append({"responses_create_params": {"input": INSTRUCTIONS}, "seed": seed,
                         "expected_actions": winning[0], "wrong_actions": [HIT]})
        seed += 1
    return rows


if __name__ == "__main__":
    count = 24 if "--subset" in sys.argv else 200
    main("blackjack", HERE, {"server": lambda: asyncio.run(winnable_rows(count))}, subset_size=24)
