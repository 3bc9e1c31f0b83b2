"""What every provider's judge does with a request before its wire format: the key it sends, and
the refusal of a request longer than the model's context; and how its invalid settings are told.

Each provider's module (``_openai``, ``_anthropic``, ``_google``) turns a ``JudgeRequest`` into
its SDK's call; these rules are the same for all of them, so they are written once, here.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any

from pydantic import BaseModel, ValidationError

from summeval_runner._errors import JudgeInputTooLargeError, MissingAPIKeyError
from summeval_runner._judges._protocol import JudgeRequest
from summeval_runner._secrets import register_secret

# Sent when api_key_env is None: local servers (vLLM, Ollama, llama.cpp) and gateways want no
# key, but every SDK requires one.
NO_KEY = "no-key"


# Set while judges and agents are built for an estimate (``keys_not_needed``): nothing they
# build sends a request, so a missing key is no reason to refuse them.
_KEYS_NOT_NEEDED: ContextVar[bool] = ContextVar("summeval_keys_not_needed", default=False)


@contextlib.contextmanager
def keys_not_needed() -> Iterator[None]:
    """Build judges and agents that will send no request (``runner.estimate``): a key that is
    not in the environment is ``NO_KEY`` instead of ``MissingAPIKeyError``."""
    token = _KEYS_NOT_NEEDED.set(True)
    try:
        yield
    finally:
        _KEYS_NOT_NEEDED.reset(token)


def missing_key(variable: str, who: str) -> str:
    """``NO_KEY`` while no request will be sent (``keys_not_needed``); else
    ``MissingAPIKeyError`` naming ``variable``."""
    if _KEYS_NOT_NEEDED.get():
        return NO_KEY
    raise MissingAPIKeyError(variable, who=who)


def api_key_from(variable: str | None, who: str) -> str:
    """The key in the environment variable ``variable`` (registered as a secret, so that it is
    scrubbed from everything written or printed), or ``NO_KEY`` when ``variable`` is ``None``.
    A variable unset or blank is ``MissingAPIKeyError``, before any request."""
    if variable is None:
        return NO_KEY
    key = os.environ.get(variable, "")
    if not key.strip():
        return missing_key(variable, who)
    register_secret(key)
    return key


def estimate_tokens(texts: Sequence[str] | Any) -> int:
    """A request's size in tokens, estimated without a tokenizer: four bytes of text a token.

    >>> estimate_tokens(["one two three four"])
    9
    """
    return sum(4 + math.ceil(len(text.encode("utf-8")) / 4) for text in texts)


def refuse_too_large(request: JudgeRequest, limit: int | None) -> None:
    """``JudgeInputTooLargeError`` for a request longer than the judge's ``max_input_tokens``
    (``None``: not known, nothing refused), before it is sent and paid for."""
    if limit is None:
        return
    size = estimate_tokens(m.content for m in request.messages)
    if size > limit:
        raise JudgeInputTooLargeError(
            f"the {request.step} request is about {size} tokens, more than the judge's "
            f"max_input_tokens ({limit}); the source or the summary is too long for it",
            size=size,
            limit=limit,
        )


def invalid_settings(error: ValidationError, schema: type[BaseModel]) -> str:
    """A judge's settings that ``schema`` refused, each named with what was expected: an unknown
    setting with the allowed ones (its value is not echoed: it could be a secret), a bad value
    with the value received."""
    problems = []
    for item in error.errors():
        where = ".".join(map(str, item["loc"])) or "settings"
        if item["type"] == "extra_forbidden":
            allowed = ", ".join(schema.model_fields)
            problems.append(f"unknown setting {where!r} (expected one of: {allowed})")
        else:
            problems.append(f"{where} {item['msg'].lower()}, got {item.get('input')!r}")
    return "; ".join(problems)
