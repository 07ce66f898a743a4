"""mock_model: a deterministic, offline stand-in for a policy model.

Per request it decides one turn from what it is given:
1. A script, when the row gives one: `responses_create_params.metadata.gym_mock_script` holds a
   JSON string, a list of turns; turn N (N = assistant turns already in the input) is
   `{"tool": NAME, "arguments": {...}}`, `{"tool_calls": [{"tool": ..., "arguments": ...}, ...]}`
   or `{"text": "..."}`. Past the end of the script it answers as in 3.
2. Otherwise, on the first turn, when tools are offered (and tool_choice is not "none"), the
   oracle (and `plain`) calls the first function tool with arguments built from its JSON schema
   (a row field with the same name as a property wins over the schema's example value). The
   adversary calls no tool.
3. Then it answers with text. The text depends on `mode` (config key, or `gym_mock_mode` in the
   row's metadata): `oracle` answers what the task expects, `adversary` a wrong answer, `plain`
   a fixed sentence. What the task expects comes from the row's task fields, which the built-in
   agents send in the `x-gym-task` header (base64url JSON of the row without its create params)
   to a model server that is a mock_model (or an openai_model with `forward_task_header: true`):
   - `expected_answer` (else `answer`, `ground_truth`, `target`): that answer. When the prompt
     asks for a `\\boxed{}` answer (as math prompts do), the mock boxes it, as a model that
     follows the prompt would: "The final answer is $\\boxed{...}$." The adversary's wrong answer
     is the number plus one, or, for an answer that is not a number, a number (boxed) or
     "not <answer>" (plain).
   - `expected_actions` (a list): a multi-step task (a game) played right, one per turn: turn N
     answers item N (the last one past the end). The adversary plays `wrong_actions` when the row
     gives them, else the wrong answer of each expected action.
   - `canonical_solution` with `prompt` (a HumanEval-style code task): the program `prompt +
     canonical_solution` in a ```python block; the adversary the prompt with `return None` as the
     body of its last function.
   No expected answer -> `plain`, unless the prompt shows the only form a reply may take as two
   or more `<tag>option</tag>` of one tag (`Reply with <action>hit</action> or
   <action>stand</action>`, a game's moves): then the oracle plays option N modulo their count at
   turn N, in the order the prompt lists them, as a model that follows the prompt would (a game
   server answers anything else with an error). With `gym_mock_answer: tool_output` in the row's metadata the
   oracle answers what its last tool call returned instead (the `stdout` of a JSON tool output,
   else the whole output), so a reward of 1.0 shows the tool really computed the answer (e.g.
   code run in a sandbox); the adversary still answers wrong.
4. Offered the coding agent's tools with a row that carries a reference `patch`, it works the SWE
   task through them instead (mock_swe.py): oracle applies the reference patch, adversary a wrong
   change, plain none; then it submits.

Its responses' `model` field is always "gym-compose-mock-model". With `hold_after_calls: N` it
holds generation calls after the first N until `POST /mock/gate` releases them (mock_gate.py):
for tests that land a fault mid-run by construction.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
from typing import Any, Optional

import orjson
from pydantic import PrivateAttr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from gym_compose.net.web import json_response, read_json_object
from gym_compose.server.base import BaseServer, BaseServerConfig
from gym_compose.server.models.mock_gate import GATE_PATH, CallGate
from gym_compose.server.models.mock_structured import structured_answer
from gym_compose.server.models.mock_swe import offers_coding_tools, swe_turn
from gym_compose.server.models.mock_tokens import (
    chat_generation,
    chat_prompt,
    responses_generation,
    responses_prompt,
    token_fields,
)
from gym_compose.server.task_header import TASK_HEADER, decode_task_header

MOCK_MODEL_NAME = "gym-compose-mock-model"
EXPECTED_ANSWER_KEYS = ("expected_answer", "answer", "ground_truth", "target")
PLAIN_ANSWER = "I have finished the task."
MODES = ("oracle", "adversary", "plain")
NON_ANSWER_NUMBER = "-7919"  # the adversary's boxed answer to a task whose answer is not a number


class MockModelConfig(BaseServerConfig):
    mode: str = "oracle"
    # When set, /v1/* answer 401 unless `Authorization: Bearer <it>`, as a real provider does:
    # a stack can check that its model key reaches the proxy (the key travels as a secret).
    required_api_key: str = ""
    # Seconds each /v1 generation call takes, like a real model's latency (uniform between
    # latency_s and latency_max_s when that is larger): for scale simulations (bench/bench_scale.py).
    latency_s: float = 0.0
    latency_max_s: float = 0.0
    # Generation calls answered before the gate holds the rest (mock_gate.py); None: no gate.
    hold_after_calls: Optional[int] = None
    # For RL training, as NeMo Gym's vllm_model: token ids and log-probs on each turn's last output
    # item (mock_tokens.py). Chat Completions gives them when the request asks as vLLM is asked
    # (`logprobs`, `return_token_ids`), and with this set also on the message.
    return_token_id_information: bool = False


def expected_answer(task: dict[str, Any]) -> Optional[Any]:
    for key in EXPECTED_ANSWER_KEYS:
        if task.get(key) is not None:
            return task[key]
    return None


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def wrong_answer(expected: Any, boxed: bool = False) -> str:
    """An answer that differs from `expected` in a way any checking verifier notices.

    A number becomes that number plus one. Other text becomes "not <text>", except inside
    `\\boxed{}`, where an equivalence checker would find the expression in it again: there it
    becomes a number that no symbolic answer equals.
    """
    text = str(expected).strip()
    number = _number(text)
    if number is None:
        if boxed:
            return NON_ANSWER_NUMBER
        return f"not {text}" if text else "wrong"
    wrong = number + 1
    return str(int(wrong)) if wrong.is_integer() else str(wrong)


def _prompt_texts(items: list[Any]) -> list[str]:
    """The prompt's system, developer and user texts, in order."""
    texts = []
    for item in items:
        if not isinstance(item, dict) or item.get("role") not in ("system", "developer", "user"):
            continue
        content = item.get("content")
        if isinstance(content, list):
            content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        if isinstance(content, str):
            texts.append(content)
    return texts


def asks_for_boxed(items: list[Any]) -> bool:
    """Whether the prompt (system, developer or user text) asks for a `\\boxed{}` answer."""
    return any("\\boxed" in text for text in _prompt_texts(items))


_TAGGED = re.compile(r"<([A-Za-z][\w-]{0,30})>([^<>\n]{1,40})</\1>")


def tagged_replies(items: list[Any]) -> tuple[str, ...]:
    """The replies the prompt offers as `<tag>option</tag>`, two or more of one tag in one text (its
    latest such text wins): `("<action>hit</action>", "<action>stand</action>")`; () when none."""
    for text in reversed(_prompt_texts(items)):
        by_tag: dict[str, list[str]] = {}
        for match in _TAGGED.finditer(text):
            options = by_tag.setdefault(match.group(1), [])
            if match.group(0) not in options:
                options.append(match.group(0))
        offered = [options for options in by_tag.values() if len(options) >= 2]
        if offered:
            return tuple(offered[0])
    return ()


def _boxed(answer: str) -> str:
    return f"The final answer is $\\boxed{{{answer}}}$."


def _turn_item(actions: Any, turn: int) -> Optional[str]:
    if isinstance(actions, list) and actions:
        return str(actions[min(turn, len(actions) - 1)])
    return None


def code_task_answer(task: dict[str, Any], mode: str) -> Optional[str]:
    """A HumanEval-style task's program: the reference solution, or the stub returning None."""
    prompt, solution = task.get("prompt"), task.get("canonical_solution")
    if not isinstance(prompt, str) or not isinstance(solution, str):
        return None
    body = solution if mode == "oracle" else "    return None\n"
    program = (prompt + body).rstrip("\n")
    return f"```python\n{program}\n```"


def task_answer(task: dict[str, Any], mode: str, turn: int, boxed: bool) -> Optional[str]:
    """What the oracle (or the adversary) answers this task at this turn; None: nothing known."""
    expected = expected_answer(task)
    if expected is not None:
        if mode == "oracle":
            return _boxed(str(expected)) if boxed else str(expected)
        wrong = wrong_answer(expected, boxed)
        return _boxed(wrong) if boxed else wrong
    action = _turn_item(task.get("expected_actions"), turn)
    if action is not None:
        if mode == "oracle":
            return action
        return _turn_item(task.get("wrong_actions"), turn) or wrong_answer(action)
    return code_task_answer(task, mode)


def example_value(schema: dict[str, Any], name: str, task: dict[str, Any]) -> Any:
    if name in task:
        return task[name]
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return False
    if kind == "array":
        return [example_value(schema.get("items") or {}, "", {}) for _ in range(int(schema.get("minItems", 1)))]
    if kind == "object":
        return arguments_from_schema(schema, task={})
    return name or "example"


def arguments_from_schema(schema: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    return {name: example_value(prop or {}, name, task) for name, prop in properties.items()}


def _function_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Function tools in Responses shape ({name, parameters}); chat shape ({function: {...}}) too."""
    found = []
    for tool in tools or []:
        if tool.get("type", "function") != "function":
            continue
        function = tool.get("function")
        found.append(function if isinstance(function, dict) else tool)
    return found


class TurnPlan:
    """What the mock says this turn: tool calls [(name, arguments)] or a text."""

    def __init__(self, calls: list[tuple[str, dict]] | None = None, text: str | None = None):
        self.calls, self.text = calls or [], text


class MockRequestError(ValueError):
    """A row's mock instructions (`gym_mock_script`, `gym_mock_mode`) that cannot be followed; a 422."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def _script_step(step: Any, turn: int) -> TurnPlan:
    where = f"metadata.gym_mock_script turn {turn}"
    if not isinstance(step, dict):
        raise MockRequestError("gym_mock_script", f"{where} must be an object, not {type(step).__name__}")
    if "text" in step:
        return TurnPlan(text=str(step["text"]))
    calls = step.get("tool_calls") or [step]
    if not isinstance(calls, list):
        raise MockRequestError("gym_mock_script", f"{where}: tool_calls must be a list")
    planned = []
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("tool"), str) or not call["tool"]:
            raise MockRequestError(
                "gym_mock_script", f'{where} needs "text", "tool" (a name) or "tool_calls" (a list of {{"tool": ...}})'
            )
        arguments = call.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise MockRequestError("gym_mock_script", f"{where}: arguments of {call['tool']!r} must be an object")
        planned.append((call["tool"], dict(arguments)))
    return TurnPlan(calls=planned)


def tool_answer(output: str) -> str:
    """The answer a tool output gives: its `stdout` when it is a JSON object with one, else itself."""
    try:
        parsed = orjson.loads(output)
    except orjson.JSONDecodeError:
        return output.strip()
    if isinstance(parsed, dict) and isinstance(parsed.get("stdout"), str):
        return parsed["stdout"].strip()
    return output.strip()


def plan_turn(turn: int, tools: list[dict[str, Any]], tool_choice: Any, metadata: dict[str, Any],
              task: dict[str, Any], mode: str, last_tool_output: Optional[str] = None,
              boxed: bool = False, replies: tuple[str, ...] = ()) -> TurnPlan:
    metadata = metadata if isinstance(metadata, dict) else {}
    row_mode = metadata.get("gym_mock_mode")
    mode = str(row_mode or mode)
    if mode not in MODES:
        raise MockRequestError("gym_mock_mode", f"mock_model mode must be one of {', '.join(MODES)}, not {mode!r}")
    script_text = metadata.get("gym_mock_script")
    coding = offers_coding_tools({str(f.get("name")) for f in _function_tools(tools)}) and "patch" in task
    script: list = []
    if script_text:
        try:
            script = orjson.loads(script_text) if isinstance(script_text, str) else script_text
        except orjson.JSONDecodeError as error:
            raise MockRequestError("gym_mock_script", f"metadata.gym_mock_script is not valid JSON: {error}") from None
        if not isinstance(script, list):
            raise MockRequestError("gym_mock_script", "metadata.gym_mock_script must be a JSON list of turns")
        if turn < len(script):
            return _script_step(script[turn], turn)
    if coding:  # the coding agent's scripted mode (mock_swe.py), after the row's own script
        calls = swe_turn(turn - len(script), mode, task)
        if calls is not None:
            return TurnPlan(calls=calls)
        return TurnPlan(text=PLAIN_ANSWER)
    if not script_text and turn == 0 and tool_choice != "none" and mode != "adversary":
        functions = _function_tools(tools)
        if functions:
            first = functions[0]
            return TurnPlan(calls=[(first["name"], arguments_from_schema(first.get("parameters") or {}, task))])
    if mode == "oracle" and metadata.get("gym_mock_answer") == "tool_output" and last_tool_output is not None:
        return TurnPlan(text=tool_answer(last_tool_output))
    answer = None if mode == "plain" else task_answer(task, mode, turn, boxed)
    if answer is None and mode == "oracle" and replies:
        answer = replies[turn % len(replies)]
    return TurnPlan(text=PLAIN_ANSWER if answer is None else answer)


def count_assistant_turns(items: list[Any], is_assistant) -> int:
    turns, previous = 0, False
    for item in items:
        current = isinstance(item, dict) and is_assistant(item)
        if current and not previous:
            turns += 1
        previous = current
    return turns


def _is_responses_assistant_item(item: dict) -> bool:
    return item.get("type") in ("function_call", "reasoning") or (
        item.get("type", "message") == "message" and item.get("role") == "assistant"
    )


def _last_text(outputs: list[Any]) -> Optional[str]:
    if not outputs:
        return None
    last = outputs[-1]
    if isinstance(last, list):  # content parts
        return "".join(str(part.get("text", "")) for part in last if isinstance(part, dict))
    return last if isinstance(last, str) else orjson.dumps(last).decode()


def _tokens(value: Any) -> int:
    return max(1, len(orjson.dumps(value)) // 4)


def _digest(value: Any) -> str:
    return hashlib.blake2b(orjson.dumps(value), digest_size=8).hexdigest()


def _unprocessable(error: MockRequestError):
    return json_response({"detail": [{"loc": ["body", "metadata", error.field], "msg": str(error),
                                      "type": "value_error"}]}, 422)


class MockModel(BaseServer):
    config: MockModelConfig
    _gate: Optional[CallGate] = PrivateAttr(default=None)

    def setup_webserver(self) -> Starlette:
        if self.config.mode not in MODES:
            raise ValueError(f"mock_model mode must be one of {', '.join(MODES)}, not {self.config.mode!r}")
        if self.config.hold_after_calls is not None and self.config.hold_after_calls < 0:
            raise ValueError(f"mock_model hold_after_calls must be 0 or more, not {self.config.hold_after_calls}")
        if self.config.hold_after_calls is not None:
            self._gate = CallGate(self.config.hold_after_calls)
        routes = [
            Route("/v1/responses", self._authorized(self._delayed(self._gated(self._responses))), methods=["POST"]),
            Route("/v1/chat/completions", self._authorized(self._delayed(self._gated(self._chat_completions))),
                  methods=["POST"]),
            Route("/v1/models", self._authorized(self._models), methods=["GET"]),
            Route("/tokenize", self._authorized(self._tokenize), methods=["POST"]),  # vLLM's, at its root
        ]
        if self._gate is not None:
            routes.append(Route(GATE_PATH, self._gate.route, methods=["GET", "POST"]))
        return Starlette(routes=routes)

    def _gated(self, endpoint):
        gate = self._gate
        if gate is None:
            return endpoint

        async def gated(request: Request):
            await gate.through()
            return await endpoint(request)

        return gated

    def _authorized(self, endpoint):
        if not self.config.required_api_key:
            return endpoint
        expected = f"Bearer {self.config.required_api_key}"

        async def checked(request: Request):
            if request.headers.get("authorization") != expected:
                return json_response(
                    {"error": {"message": "invalid or missing API key", "type": "invalid_api_key"}}, 401)
            return await endpoint(request)

        return checked

    def _delayed(self, endpoint):
        low, high = self.config.latency_s, max(self.config.latency_s, self.config.latency_max_s)
        if high <= 0:
            return endpoint

        async def delayed(request: Request):
            await asyncio.sleep(random.uniform(low, high))
            return await endpoint(request)

        return delayed

    async def _models(self, request: Request):
        return json_response(
            {"object": "list", "data": [{"id": MOCK_MODEL_NAME, "object": "model", "owned_by": "gym-compose"}]})

    async def _responses(self, request: Request):
        body = await read_json_object(request)
        items = body.get("input") or []
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        task = decode_task_header(request.headers.get(TASK_HEADER))
        turn = count_assistant_turns(items, _is_responses_assistant_item)
        tool_outputs = [item.get("output") for item in items
                        if isinstance(item, dict) and item.get("type") == "function_call_output"]
        try:
            plan = plan_turn(turn, body.get("tools") or [], body.get("tool_choice", "auto"),
                             body.get("metadata") or {}, task, self.config.mode, _last_text(tool_outputs),
                             boxed=asks_for_boxed(items), replies=tagged_replies(items))
        except MockRequestError as error:
            return _unprocessable(error)
        key = _digest([items, turn])
        output: list[dict[str, Any]]
        if plan.calls:
            output = [
                {"type": "function_call", "id": f"fc_{key}_{index}", "call_id": f"call_{key}_{index}",
                 "name": name, "arguments": orjson.dumps(arguments).decode(), "status": "completed"}
                for index, (name, arguments) in enumerate(plan.calls)
            ]
        else:
            text = structured_answer(body) or plan.text  # a judge asking for JSON gets JSON (mock_structured.py)
            output = [{"type": "message", "id": f"msg_{key}", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]}]
        input_tokens, output_tokens = _tokens(items), _tokens(output)
        if self.config.return_token_id_information:
            output[-1].update(token_fields(responses_prompt(body), responses_generation(output)))
        return json_response({
            "id": f"resp_{key}", "object": "response", "created_at": 0.0, "model": MOCK_MODEL_NAME,
            "status": "completed", "output": output, "error": None, "incomplete_details": None,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
            "metadata": body.get("metadata") or {},
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                      "total_tokens": input_tokens + output_tokens,
                      "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
        })

    async def _chat_completions(self, request: Request):
        body = await read_json_object(request)
        messages = body.get("messages") or []
        task = decode_task_header(request.headers.get(TASK_HEADER))
        turn = sum(1 for message in messages if isinstance(message, dict) and message.get("role") == "assistant")
        tool_outputs = [message.get("content") for message in messages
                        if isinstance(message, dict) and message.get("role") == "tool"]
        try:
            plan = plan_turn(turn, body.get("tools") or [], body.get("tool_choice", "auto"),
                             body.get("metadata") or {}, task, self.config.mode, _last_text(tool_outputs),
                             boxed=asks_for_boxed(messages), replies=tagged_replies(messages))
        except MockRequestError as error:
            return _unprocessable(error)
        key = _digest([messages, turn])
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if plan.calls:
            message["tool_calls"] = [
                {"id": f"call_{key}_{index}", "type": "function",
                 "function": {"name": name, "arguments": orjson.dumps(arguments).decode()}}
                for index, (name, arguments) in enumerate(plan.calls)
            ]
            finish_reason = "tool_calls"
        else:
            message["content"] = structured_answer(body) or plan.text  # a judge asking for JSON gets JSON
            finish_reason = "stop"
        prompt_tokens, completion_tokens = _tokens(messages), _tokens(message)
        completion: dict[str, Any] = {
            "id": f"chatcmpl_{key}", "object": "chat.completion", "created": 0, "model": MOCK_MODEL_NAME,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }
        if self.config.return_token_id_information or body.get("return_token_ids") or body.get("logprobs"):
            self._chat_token_ids(body, completion)
        return json_response(completion)

    def _chat_token_ids(self, body: dict[str, Any], completion: dict[str, Any]) -> None:
        """What vLLM answers for each way of asking: per-token logprobs (`logprobs`, the ids as
        `token_id:<id>` with `return_tokens_as_token_ids`), inline ids (`return_token_ids`); and in
        training mode the bundle on the message that NeMo RL's vLLM puts there."""
        choice = completion["choices"][0]
        message = choice["message"]
        fields = token_fields(chat_prompt(body), chat_generation(message))
        generated = fields["generation_token_ids"]
        if body.get("logprobs"):
            as_ids = body.get("return_tokens_as_token_ids")
            choice["logprobs"] = {"content": [
                {"token": f"token_id:{token}" if as_ids else chr(token) if token < 256 else f"<|{token}|>",
                 "logprob": log_prob, "bytes": None, "top_logprobs": []}
                for token, log_prob in zip(generated, fields["generation_log_probs"], strict=True)]}
        if body.get("return_token_ids"):
            completion["prompt_token_ids"] = fields["prompt_token_ids"]
            choice["token_ids"] = generated
        if self.config.return_token_id_information:
            message.update(fields)

    async def _tokenize(self, request: Request):
        """vLLM's /tokenize: the prompt's tokens, of Chat Completions `messages` or Responses `input`."""
        body = await read_json_object(request)
        tokens = chat_prompt(body) if "messages" in body else responses_prompt(body)
        return json_response({"tokens": tokens, "count": len(tokens), "max_model_len": 1 << 20})
