"""Typed models of the Responses API subset that NeMo Gym servers exchange.

Request params reject unknown keys (a typo in a dataset row must not be silently dropped);
output items and responses accept extra keys so real providers' additions pass through.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")

    def to_dict(self, *, mode: Literal["json", "python"] = "python", exclude_unset: bool = True,
                exclude_none: bool = False) -> dict[str, Any]:
        """The OpenAI SDK's `to_dict()` (its defaults: only the fields that were set)."""
        return self.model_dump(mode=mode, exclude_unset=exclude_unset, exclude_none=exclude_none)

    def to_json(self, *, indent: Optional[int] = 2, exclude_unset: bool = True, exclude_none: bool = False) -> str:
        """The OpenAI SDK's `to_json()`."""
        return self.model_dump_json(indent=indent, exclude_unset=exclude_unset, exclude_none=exclude_none)


class OutputText(_Open):
    text: str
    type: Literal["output_text"] = "output_text"
    annotations: list[Any] = Field(default_factory=list)


class Refusal(_Open):
    refusal: str
    type: Literal["refusal"] = "refusal"


class OutputMessage(_Open):
    id: str = ""
    content: list[Annotated[Union[OutputText, Refusal], Field(discriminator="type")]]
    role: Literal["assistant"] = "assistant"
    status: Literal["in_progress", "completed", "incomplete"] = "completed"
    type: Literal["message"] = "message"


class InputMessage(_Open):
    """A message the caller sends: `content` is text or a list of content parts."""

    content: Union[str, list[dict[str, Any]]]
    role: Literal["user", "assistant", "system", "developer"]
    type: Literal["message"] = "message"


class FunctionCall(_Open):
    arguments: str
    call_id: str
    name: str
    type: Literal["function_call"] = "function_call"
    id: Optional[str] = None
    status: Optional[Literal["in_progress", "completed", "incomplete"]] = None


class FunctionCallOutput(_Open):
    call_id: str
    output: Union[str, list[dict[str, Any]]]
    type: Literal["function_call_output"] = "function_call_output"
    id: Optional[str] = None
    status: Optional[Literal["in_progress", "completed", "incomplete"]] = None


class SummaryText(_Open):
    text: str
    type: Literal["summary_text"] = "summary_text"


class ReasoningItem(_Open):
    id: str = ""
    summary: list[SummaryText] = Field(default_factory=list)
    type: Literal["reasoning"] = "reasoning"
    content: Optional[list[dict[str, Any]]] = None
    encrypted_content: Optional[str] = None


def _item_tag(value: Any) -> str:
    item_type = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", "message")
    if item_type == "message":
        role = value.get("role") if isinstance(value, dict) else getattr(value, "role", None)
        content = value.get("content") if isinstance(value, dict) else getattr(value, "content", None)
        is_output = role == "assistant" and isinstance(content, list) and all(
            (part.get("type") if isinstance(part, dict) else getattr(part, "type", None)) in ("output_text", "refusal")
            for part in content
        ) and bool(content)
        return "output_message" if is_output else "input_message"
    return item_type


InputItem = Annotated[
    Union[
        Annotated[InputMessage, Tag("input_message")],
        Annotated[OutputMessage, Tag("output_message")],
        Annotated[FunctionCall, Tag("function_call")],
        Annotated[FunctionCallOutput, Tag("function_call_output")],
        Annotated[ReasoningItem, Tag("reasoning")],
    ],
    Discriminator(_item_tag),
]

# An episode's output also carries tool outputs and observation messages, so it takes any item.
OutputItem = InputItem


class ResponseCreateParams(BaseModel):
    """`POST /v1/responses` body (non-streaming). Unknown keys are an error."""

    model_config = ConfigDict(extra="forbid")

    input: Union[str, list[InputItem]]
    background: Optional[bool] = None
    # in NeMo Gym 0.7's NeMoGymResponseCreateParamsNonStreaming (openai 2.x), which its agents dump
    # whole (None included) into the /verify bodies they send
    context_management: Optional[list[dict[str, Any]]] = None
    conversation: Optional[Union[str, dict[str, Any]]] = None
    include: Optional[list[str]] = None
    instructions: Optional[str] = None
    max_output_tokens: Optional[int] = None
    max_tool_calls: Optional[int] = None
    metadata: Optional[dict[str, Any]] = None
    model: Optional[str] = None
    moderation: Optional[Any] = None
    parallel_tool_calls: bool = True
    previous_response_id: Optional[str] = None
    prompt: Optional[dict[str, Any]] = None
    prompt_cache_key: Optional[str] = None
    prompt_cache_retention: Optional[str] = None
    reasoning: Optional[dict[str, Any]] = None
    safety_identifier: Optional[str] = None
    service_tier: Optional[str] = None
    store: Optional[bool] = None
    stream: Optional[Literal[False]] = None
    stream_options: Optional[dict[str, Any]] = None
    temperature: Optional[float] = None
    text: Optional[dict[str, Any]] = None
    tool_choice: Union[str, dict[str, Any]] = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    top_logprobs: Optional[int] = None
    top_p: Optional[float] = None
    truncation: Optional[Literal["auto", "disabled"]] = None
    user: Optional[str] = None


class Usage(_Open):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    input_tokens_details: dict[str, Any] = Field(default_factory=lambda: {"cached_tokens": 0})
    output_tokens_details: dict[str, Any] = Field(default_factory=lambda: {"reasoning_tokens": 0})


class Response(_Open):
    """A Responses API response; for an agent, `output` is the whole episode."""

    id: str = ""
    created_at: float = 0.0
    model: str = ""
    object: Literal["response"] = "response"
    output: list[InputItem]
    parallel_tool_calls: bool = True
    tool_choice: Union[str, dict[str, Any]] = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    usage: Optional[Usage] = None
    error: Optional[dict[str, Any]] = None
    incomplete_details: Optional[dict[str, Any]] = None
    metadata: Optional[dict[str, Any]] = None
    status: Optional[str] = None

    @property
    def output_text(self) -> str:
        """The OpenAI SDK's convenience: the text of every `output_text` part of the output messages, joined."""
        return output_text_of(self.output)


def output_text_of(output: list[Any]) -> str:
    """All assistant text in output items (models or dicts): `output_text` parts, or a message's plain string."""
    parts = []
    for item in output:
        if _field(item, "type") != "message":
            continue
        content = _field(item, "content")
        if isinstance(content, str):
            parts.append(content)
            continue
        for part in content or []:
            text = _field(part, "text")
            if _field(part, "type") == "output_text" and text is not None:
                parts.append(text)
    return "".join(parts)


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def add_usage(total: Optional[dict], turn: Optional[dict]) -> Optional[dict]:
    """Sum two usage dicts field by field (token details included); None counts as nothing."""
    if not turn:
        return total
    if not total:
        return {key: (dict(value) if isinstance(value, dict) else value) for key, value in turn.items()}
    summed = dict(total)
    for key, value in turn.items():
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)):
            summed[key] = (summed.get(key) or 0) + value
        elif isinstance(value, dict):
            summed[key] = add_usage(summed.get(key) or {}, value)
    return summed
