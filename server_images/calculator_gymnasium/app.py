"""Calculator, gymnasium protocol: `calculate` tool calls are actions; a text answer ends the episode.

The reward of the final step is 1.0 when the answer states the row's `expected_answer`.
"""

import json
import re

from nemo_gym.openai_utils import NeMoGymResponse
from resources_servers.gymnasium import GymnasiumServer, extract_text

from calculator_eval import evaluate


class CalculatorEnv(GymnasiumServer):
    async def reset(self, metadata: dict, session_id=None):
        self.session_state[session_id] = {"calls": 0}
        return None, {}

    async def step(self, action: NeMoGymResponse, metadata: dict, session_id=None):
        state = self.session_state.setdefault(session_id, {"calls": 0})
        calls = [item for item in action.output if item.type == "function_call"]
        if calls:
            outputs = []
            for call in calls:
                state["calls"] += 1
                if call.name != "calculate":
                    outputs.append(self.tool_output(call, {"error": f"unknown tool {call.name!r}"}))
                    continue
                try:
                    result = {"result": evaluate(json.loads(call.arguments)["expression"])}
                except Exception as error:  # noqa: BLE001 - the model sees the error
                    result = {"error": str(error)}
                outputs.append(self.tool_output(call, result))
            return None, 0.0, False, False, {"tool_outputs": outputs}
        numbers = re.findall(r"-?\d+(?:\.\d+)?", extract_text(action))
        expected = float(metadata["expected_answer"])
        correct = bool(numbers) and abs(float(numbers[-1]) - expected) < 1e-6
        return None, float(correct), True, False, {"tool_calls": state["calls"]}


if __name__ == "__main__":
    CalculatorEnv.run_webserver()
