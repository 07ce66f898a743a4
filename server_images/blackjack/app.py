"""Blackjack, multi-step gymnasium protocol: the model hits or stands until the hand ends.

Reward at the end: +1 win, 0 push, -1 loss. A reply without `<action>hit</action>` stands.
A row may give `seed` (int) for a reproducible deck; otherwise each hand is shuffled at random.
"""

import random
import re

from nemo_gym.openai_utils import NeMoGymResponse
from resources_servers.gymnasium import GymnasiumServer, extract_text

CARDS = ["A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K"]
ACTION = re.compile(r"<action>\s*(hit|stand)\s*</action>", re.IGNORECASE)


def points(hand: list[str]) -> int:
    total = sum(11 if card == "A" else 10 if card in ("J", "Q", "K") else int(card) for card in hand)
    soft_aces = hand.count("A")
    while total > 21 and soft_aces:
        total, soft_aces = total - 10, soft_aces - 1
    return total


def describe(player: list[str], dealer_up: str) -> str:
    return (f"You hold {' '.join(player)} ({points(player)} points). The dealer shows {dealer_up}. "
            "Reply with <action>hit</action> or <action>stand</action>.")


class BlackjackEnv(GymnasiumServer):
    async def reset(self, metadata: dict, session_id=None):
        deck = random.Random(metadata.get("seed"))
        player, dealer = [deck.choice(CARDS), deck.choice(CARDS)], [deck.choice(CARDS), deck.choice(CARDS)]
        self.session_state[session_id] = {"deck": deck, "player": player, "dealer": dealer}
        return describe(player, dealer[0]), {}

    async def step(self, action: NeMoGymResponse, metadata: dict, session_id=None):
        hand = self.session_state.get(session_id)
        if hand is None:
            return None, 0.0, False, True, {"error": "no hand in play for this session; call /reset first"}
        choice = ACTION.search(extract_text(action))
        if choice and choice.group(1).lower() == "hit":
            hand["player"].append(hand["deck"].choice(CARDS))
            if points(hand["player"]) > 21:
                return None, -1.0, True, False, {"result": "bust", "player": hand["player"]}
            return describe(hand["player"], hand["dealer"][0]), 0.0, False, False, {}
        while points(hand["dealer"]) < 17:
            hand["dealer"].append(hand["deck"].choice(CARDS))
        mine, theirs = points(hand["player"]), points(hand["dealer"])
        if theirs > 21 or mine > theirs:
            reward, result = 1.0, "win"
        elif mine == theirs:
            reward, result = 0.0, "push"
        else:
            reward, result = -1.0, "loss"
        return None, reward, True, False, {"result": result, "player": hand["player"], "dealer": hand["dealer"]}


if __name__ == "__main__":
    BlackjackEnv.run_webserver()
