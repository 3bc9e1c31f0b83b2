"""Message shapes, and what the scorer reads from them (SPEC §1.2).

Payloads arrive as agent frameworks export them, so this module accepts, without configuration:

- a plain string (the source itself as input, the summary itself as output);
- a list of messages, each a string or a mapping with ``role``, ``id`` and ``content``;
- a mapping holding that list under ``messages``, ``input_messages`` / ``inputMessages`` or
  ``output_messages`` / ``outputMessages``; or a single message mapping.

Content is a string, a list of parts (``{"type": "text", "text": ...}``, tool calls, tool
results), a mapping with ``content`` / ``text``, or a single part. Any other shape is an
``InputError`` naming where it is, never text read as empty; ``check_readable`` applies the same
rule to data before a run. Tool calls are also read from OpenAI's
``tool_calls`` field and tool results from ``role: "tool"`` messages. Keys are accepted in
snake_case and camelCase.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from summeval_runner._errors import InputError

_LIST_KEYS = ("messages", "input_messages", "inputMessages", "output_messages", "outputMessages")
_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
_TOOL_CALL_PART_TYPES = frozenset(
    {"tool_call", "tool-call", "toolCall", "tool_use", "function_call"}
)
_TOOL_RESULT_PART_TYPES = frozenset({"tool_result", "tool-result", "toolResult"})
# LangChain exports a message's kind under "type" instead of "role".
_ROLE_ALIASES = {"human": "user", "ai": "assistant"}


@dataclass(frozen=True)
class ToolCall:
    """A tool call made by an assistant turn."""

    tool_call_id: str | None
    tool_name: str | None
    args: Any


@dataclass(frozen=True)
class ToolResult:
    """A tool's result, with the arguments of the call that produced it when they are known."""

    tool_name: str | None
    tool_call_id: str | None
    args: Any
    result: Any


@dataclass(frozen=True)
class Message:
    """One message, normalised: its role, its text, and its tool calls and results."""

    role: str
    text: str
    id: str | None = None
    tool_calls: tuple[ToolCall, ...] = field(default=())
    tool_results: tuple[ToolResult, ...] = field(default=())


def _shown(value: Any) -> str:
    """A value as an error shows it: its type and the start of its repr."""
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _first(mapping: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in mapping and mapping[key] is not None:
            return mapping[key]
    return None


def _decode_arguments(raw: Any) -> Any:
    # OpenAI sends arguments as a JSON string; other frameworks send the object itself.
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _tool_call(raw: Mapping[str, Any]) -> ToolCall:
    function = raw.get("function")
    if isinstance(function, Mapping):
        return ToolCall(
            tool_call_id=_first(raw, "id", "tool_call_id", "toolCallId"),
            tool_name=function.get("name"),
            args=_decode_arguments(function.get("arguments")),
        )
    return ToolCall(
        tool_call_id=_first(raw, "tool_call_id", "toolCallId", "id"),
        tool_name=_first(raw, "tool_name", "toolName", "name"),
        args=_decode_arguments(_first(raw, "args", "arguments", "input")),
    )


def _tool_result(raw: Mapping[str, Any]) -> ToolResult:
    return ToolResult(
        tool_name=_first(raw, "tool_name", "toolName", "name"),
        tool_call_id=_first(raw, "tool_call_id", "toolCallId", "tool_use_id", "id"),
        args=_decode_arguments(_first(raw, "args", "arguments", "input")),
        result=_first(raw, "result", "output", "content"),
    )


@dataclass
class _ContentParts:
    texts: list[str] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)


def _read_content(content: Any, where: str, parts: _ContentParts) -> None:
    if content is None:
        return
    if isinstance(content, str):
        parts.texts.append(content)
    elif isinstance(content, Mapping):
        if "content" in content or "text" in content:
            _read_content(_first(content, "content", "text"), where, parts)
        elif "type" in content:
            _read_part(content, where, parts)
        else:
            # Read as empty, whatever text it holds would vanish (a summary judged blank).
            raise InputError(
                f"{where}: content as a mapping must hold 'content' or 'text' (or be a part "
                f"with a 'type'), got keys {sorted(map(str, content))}"
            )
    elif isinstance(content, Sequence):
        for index, part in enumerate(content):
            _read_part(part, f"{where} part {index}", parts)
    else:
        raise InputError(
            f"{where}: content must be a string, a list of parts or a mapping with "
            f"'content' or 'text', got {_shown(content)}"
        )


def _read_part(part: Any, where: str, parts: _ContentParts) -> None:
    if isinstance(part, str):
        parts.texts.append(part)
        return
    if not isinstance(part, Mapping):
        raise InputError(
            f"{where}: a content part must be a string or a mapping, got {_shown(part)}"
        )
    kind = part.get("type")
    if kind is None and "text" not in part:
        # Neither a kind of part nor text: skipped, whatever text it holds would vanish.
        raise InputError(
            f"{where}: a content part must have a 'type' or a 'text', "
            f"got keys {sorted(map(str, part))}"
        )
    if kind in _TOOL_CALL_PART_TYPES:
        parts.tool_calls.append(_tool_call(part))
    elif kind in _TOOL_RESULT_PART_TYPES:
        parts.tool_results.append(_tool_result(part))
    elif kind in _TEXT_PART_TYPES or (kind is None and "text" in part):
        text = part.get("text")
        if text is not None and not isinstance(text, str):
            raise InputError(f"{where}: 'text' must be a string, got {_shown(text)}")
        parts.texts.append(text or "")
    # Other parts (images, audio, reasoning) carry no text to judge.


def _read_message(raw: Any, where: str, default_role: str) -> Message:
    if isinstance(raw, str):
        return Message(role=default_role, text=raw)
    if not isinstance(raw, Mapping):
        raise InputError(f"{where}: a message must be a string or a mapping, got {_shown(raw)}")
    role = raw.get("role")
    if role is None:
        role = _ROLE_ALIASES.get(str(raw.get("type")), default_role)
    if not isinstance(role, str):
        raise InputError(f"{where}: 'role' must be a string, got {_shown(role)}")
    parts = _ContentParts()
    _read_content(_first(raw, "content", "text"), where, parts)
    raw_calls = _first(raw, "tool_calls", "toolCalls")
    if raw_calls is not None:
        if not isinstance(raw_calls, Sequence) or isinstance(raw_calls, str):
            raise InputError(
                f"{where}: 'tool_calls' must be a list, got {type(raw_calls).__name__}"
            )
        parts.tool_calls.extend(_tool_call(call) for call in raw_calls if isinstance(call, Mapping))
    if role == "tool" and not parts.tool_results:
        # OpenAI's shape: the message itself is the result of the call it names.
        parts.tool_results.append(
            ToolResult(
                tool_name=_first(raw, "tool_name", "toolName", "name"),
                tool_call_id=_first(raw, "tool_call_id", "toolCallId"),
                args=None,
                result="\n".join(parts.texts),
            )
        )
    message_id = raw.get("id")
    return Message(
        role=role,
        text="\n".join(parts.texts),
        id=None if message_id is None else str(message_id),
        tool_calls=tuple(parts.tool_calls),
        tool_results=tuple(parts.tool_results),
    )


def parse_messages(payload: Any, *, what: str, default_role: str) -> tuple[Message, ...]:
    """Normalise an input or output payload into messages.

    ``what`` names the payload in error messages ("input", "output"); ``default_role`` is the
    role given to plain strings and to messages without one.
    """
    if payload is None:
        return ()
    if isinstance(payload, str):
        return (Message(role=default_role, text=payload),)
    if isinstance(payload, Mapping):
        for key in _LIST_KEYS:
            if key in payload:
                return parse_messages(payload[key], what=f"{what}.{key}", default_role=default_role)
        if any(key in payload for key in ("role", "content", "text", "type")):
            return (_read_message(payload, what, default_role),)
        raise InputError(
            f"{what}: a mapping must hold a message ('role', 'content') or a list under one of "
            f"{', '.join(_LIST_KEYS)}; got keys {sorted(map(str, payload))}"
        )
    if isinstance(payload, Iterable):
        return tuple(
            _read_message(raw, f"{what} message {index}", default_role)
            for index, raw in enumerate(payload)
        )
    raise InputError(
        f"{what}: expected a string, a list of messages or a mapping, got {_shown(payload)}"
    )


def check_readable(payload: Any, *, what: str) -> None:
    """Raise ``InputError`` if the scorer could not read ``payload`` as an input or an output.

    The rule is ``parse_messages``'s, the one ``extract_source`` and ``extract_summary`` apply,
    so a dataset checked with it holds nothing the scorer then fails on. ``what`` names the
    payload in the message (``field 'text' (dataset.fields.input)``).
    """
    parse_messages(payload, what=what, default_role="user")


def extract_summary(output: Any) -> str:
    """The text of the last assistant message with non-blank text; ``""`` when there is none.

    Assistant turns that only carry tool calls are skipped. A plain string is the summary itself.

    >>> extract_summary([
    ...     {"role": "assistant", "content": "The summary."},
    ...     {"role": "assistant", "content": "",
    ...      "tool_calls": [{"id": "c1", "function": {"name": "f"}}]},
    ... ])
    'The summary.'
    """
    for message in reversed(parse_messages(output, what="output", default_role="assistant")):
        if message.role == "assistant" and message.text.strip():
            return message.text
    return ""


def extract_source(input: Any) -> str:
    """The text of the first user message of ``input``; a plain string is the source itself."""
    for message in parse_messages(input, what="input", default_role="user"):
        if message.role == "user":
            return message.text
    return ""


def extract_tool_results(output: Any) -> list[ToolResult]:
    """The tool results found in ``output``, in order, for use in a ``source_extractor``.

    A result that does not carry its arguments gets those of the tool call with the same id.

    >>> results = extract_tool_results([
    ...     {"role": "assistant", "tool_calls": [
    ...         {"id": "c1", "function": {"name": "fetch", "arguments": '{"url": "u"}'}}]},
    ...     {"role": "tool", "tool_call_id": "c1", "content": "the page"},
    ... ])
    >>> results[0].tool_name, results[0].args, results[0].result
    ('fetch', {'url': 'u'}, 'the page')
    """
    messages = parse_messages(output, what="output", default_role="assistant")
    calls = {
        call.tool_call_id: call for m in messages for call in m.tool_calls if call.tool_call_id
    }
    found: list[ToolResult] = []
    for message in messages:
        for result in message.tool_results:
            call = calls.get(result.tool_call_id) if result.tool_call_id else None
            if call is not None:
                result = ToolResult(
                    tool_name=result.tool_name or call.tool_name,
                    tool_call_id=result.tool_call_id,
                    args=result.args if result.args is not None else call.args,
                    result=result.result,
                )
            found.append(result)
    return found
