"""Turn the ``model`` argument of ``create_summarization_scorer`` into a judge."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from summeval_runner._errors import ConfigError
from summeval_runner._judges._anthropic import AnthropicJudge, anthropic_config_from
from summeval_runner._judges._azure import AzureJudge, azure_config_from
from summeval_runner._judges._google import GoogleJudge, google_config_from
from summeval_runner._judges._offline import OfflineJudge, OfflineSettings
from summeval_runner._judges._openai import OpenAIJudge, openai_config_from
from summeval_runner._judges._protocol import Judge

PROVIDERS = ("offline", "openai", "azure", "anthropic", "google")
_KINDS = {bool: "true or false", float: "a number", int: "a whole number"}


def resolve_judge(model: str | Mapping[str, Any] | Judge) -> Judge:
    """``"offline"``, ``"openai/<name>"``, ``"azure/<deployment>"``, ``"anthropic/<name>"``,
    ``"google/<name>"``, a mapping with ``provider`` and its settings, or a judge. A provider's
    SDK, when it is an optional extra (``anthropic``, ``google``), is imported only as its judge
    is built.

    >>> resolve_judge("offline").name
    'offline'
    >>> resolve_judge("mistral/large")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    summeval_runner._errors.ConfigError: unknown judge provider 'mistral' in model 'mistral/...
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
        return OfflineJudge(_offline_settings(settings, given))
    if provider == "openai":
        if not settings.get("name"):
            raise ConfigError(f"an openai judge needs a model name ('openai/<name>'), got {given}")
        return OpenAIJudge(openai_config_from(settings))
    if provider == "azure":
        if not settings.get("name"):
            raise ConfigError(
                f"an azure judge needs its deployment's name ('azure/<deployment>'), got {given}"
            )
        return AzureJudge(azure_config_from(settings))
    if provider == "anthropic":
        if not settings.get("name"):
            raise ConfigError(
                f"an anthropic judge needs a model name ('anthropic/<name>'), got {given}"
            )
        return AnthropicJudge(anthropic_config_from(settings))
    if provider == "google":
        if not settings.get("name"):
            raise ConfigError(
                f"a google judge needs a model name ('google/gemini-2.5-flash'), got {given}"
            )
        return GoogleJudge(google_config_from(settings))
    raise ConfigError(
        f"unknown judge provider {provider!r} in model {given}; "
        f"expected one of: {', '.join(PROVIDERS)}"
    )


def _offline_settings(settings: dict[str, Any], given: str) -> OfflineSettings:
    """``OfflineSettings`` from a judge mapping's keys (``+model.fine_claims=true``).

    >>> _offline_settings({"support_recall": 0.7}, "model").support_recall
    0.7
    >>> _offline_settings({"recall": 0.7}, "model")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    summeval_runner._errors.ConfigError: the offline judge has no setting 'recall' (in model); ...
    """
    known = {field.name: field for field in fields(OfflineSettings)}
    for key, value in settings.items():
        field = known.get(key)
        if field is None:
            raise ConfigError(
                f"the offline judge has no setting {key!r} (in {given}); "
                f"expected one of: {', '.join(known)}"
            )
        expected: type = type(field.default)
        # bool is an int, and an int is a fine float: check the kind a user would mean.
        if expected is bool:
            fits = isinstance(value, bool)
        elif expected is float:
            fits = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            fits = isinstance(value, int) and not isinstance(value, bool)
        if not fits:
            raise ConfigError(
                f"the offline judge's {key} must be {_KINDS[expected]}, got {value!r} (in {given})"
            )
    try:
        return OfflineSettings(**settings)
    except ValueError as error:
        raise ConfigError(f"the offline judge's settings (in {given}): {error}") from None
