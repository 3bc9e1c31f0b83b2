"""Turn the ``model`` argument of ``create_summarization_scorer`` into a judge."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from summeval_runner._errors import ConfigError
from summeval_runner._judges._offline import OfflineJudge
from summeval_runner._judges._openai import OpenAIJudge, openai_config_from
from summeval_runner._judges._protocol import Judge

PROVIDERS = ("offline", "openai")


def resolve_judge(model: str | Mapping[str, Any] | Judge) -> Judge:
    """``"offline"``, ``"openai/<name>"``, a mapping with ``provider`` and its settings, or a judge.

    >>> resolve_judge("offline").name
    'offline'
    >>> resolve_judge("anthropic/claude")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    summeval_runner._errors.ConfigError: unknown judge provider 'anthropic' in model 'anthropic/...
    """
    if isinstance(model, str):
        provider, _, name = model.partition("/")
        return _build(provider, {"name": name} if name else {}, repr(model))
    if isinstance(model, Mapping):
        settings = dict(model)
        provider = settings.pop("provider", None)
        if not isinstance(provider, str):
            raise ConfigError(
                f"a judge mapping needs a 'provider' string (one of: {', '.join(PROVIDERS)}), "
                f"got {provider!r}"
            )
        return _build(provider, settings, f"{{provider: {provider!r}, ...}}")
    if isinstance(model, Judge):
        return model
    raise ConfigError(
        "model must be 'offline', 'provider/name', a mapping of judge settings or an object "
        f"with an async complete(request) method; got {type(model).__name__}"
    )


def _build(provider: str, settings: dict[str, Any], given: str) -> Judge:
    if provider == "offline":
        if settings:
            raise ConfigError(
                f"the offline judge takes no settings, got {sorted(settings)} in {given}"
            )
        return OfflineJudge()
    if provider == "openai":
        if not settings.get("name"):
            raise ConfigError(f"an openai judge needs a model name ('openai/<name>'), got {given}")
        return OpenAIJudge(openai_config_from(settings))
    raise ConfigError(
        f"unknown judge provider {provider!r} in model {given}; "
        f"expected one of: {', '.join(PROVIDERS)}"
    )
