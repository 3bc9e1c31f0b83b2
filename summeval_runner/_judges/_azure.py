"""The Azure OpenAI provider: a deployment of an Azure OpenAI resource, through the SDK's
``AsyncAzureOpenAI``.

Azure speaks OpenAI's Chat Completions API under another address: the request goes to
``{endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...``, with the key in
an ``api-key`` header. The SDK's Azure client builds both; the request's body, its errors, the
parameters a model refuses (``_learned``) and what a reply holds are the OpenAI provider's.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationError

from summeval_runner._errors import ConfigError
from summeval_runner._judges._openai import OpenAIChat, OpenAIJudge, OpenAIJudgeConfig
from summeval_runner._judges._request import invalid_settings

if TYPE_CHECKING:
    import openai


class AzureJudgeConfig(OpenAIJudgeConfig):
    """Settings of an Azure OpenAI judge: ``name`` is the deployment's, ``base_url`` the
    resource's endpoint (``https://<resource>.openai.azure.com``; else
    ``AZURE_OPENAI_ENDPOINT``), ``api_version`` the API version every request names (else
    ``OPENAI_API_VERSION``), the key in ``AZURE_OPENAI_API_KEY`` (``api_key_env``).
    ``deployed_model`` is the model the deployment serves, for its price when ``price`` is not
    given (``None``: the deployment's name, which Azure's default deployments share with it)."""

    api_key_env: str | None = "AZURE_OPENAI_API_KEY"
    api_version: str | None = Field(default=None, min_length=1)
    deployed_model: str | None = Field(default=None, min_length=1)


class AzureChat(OpenAIChat):
    """One Azure OpenAI deployment: an ``OpenAIChat`` whose client is ``AsyncAzureOpenAI``."""

    def __init__(self, config: AzureJudgeConfig) -> None:
        endpoint = config.base_url or os.environ.get("AZURE_OPENAI_ENDPOINT")
        if not endpoint:
            raise ConfigError(
                "an azure judge needs its resource's endpoint: base_url "
                "(https://<resource>.openai.azure.com) or AZURE_OPENAI_ENDPOINT"
            )
        api_version = config.api_version or os.environ.get("OPENAI_API_VERSION")
        if not api_version:
            raise ConfigError(
                "an azure judge needs api_version (the API version its requests name, such as "
                "2024-10-21), or OPENAI_API_VERSION"
            )
        self.api_version = api_version
        self._deployment = config.name
        super().__init__(
            base_url=endpoint,
            api_key_env=config.api_key_env,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
        )

    def __repr__(self) -> str:
        return f"AzureChat(deployment={self._deployment!r}, {super().__repr__()})"

    def _new_client(self) -> openai.AsyncOpenAI:
        import openai  # imported here as in _openai: only a process that calls Azure needs it

        return openai.AsyncAzureOpenAI(
            azure_endpoint=self.base_url,
            # The deployment in the client's URL: the judge's requests name no model to route by
            # (their body is sent as it is).
            azure_deployment=self._deployment,
            api_version=self.api_version,
            api_key=self._api_key,
            timeout=self._timeout_s,
            max_retries=self._max_retries,
            http_client=openai.DefaultAioHttpClient(),
        )


class AzureJudge(OpenAIJudge):
    """A judge backed by a deployment of an Azure OpenAI resource.

    Azure's Batch API takes other lines and endpoints than OpenAI's: ``runner.mode=batch`` is
    refused for this judge before any call (it is no ``BatchJudge``).
    """

    provider = "azure"
    config: AzureJudgeConfig

    # Not a BatchJudge: a protocol member set to None opts a class out of it.
    submit_batch = None  # type: ignore[assignment]
    batch_state = None  # type: ignore[assignment]
    tagged_batches = None  # type: ignore[assignment]
    batch_file = None  # type: ignore[assignment]
    batch_reply = None  # type: ignore[assignment]

    def __init__(self, config: AzureJudgeConfig) -> None:
        super().__init__(config)

    def _open_chat(self, config: OpenAIJudgeConfig) -> OpenAIChat:
        assert isinstance(config, AzureJudgeConfig)
        return AzureChat(config)

    def _priced_as(self) -> str:
        return self.config.deployed_model or self.config.name

    def cache_identity(self) -> dict[str, Any]:
        identity = super().cache_identity()
        chat = self._chat
        assert isinstance(chat, AzureChat)
        # Replies depend on the API version a deployment is asked through, and on the model
        # it serves.
        identity["api_version"] = chat.api_version
        if self.config.deployed_model is not None:
            identity["deployed_model"] = self.config.deployed_model
        return identity


def azure_config_from(settings: dict[str, Any]) -> AzureJudgeConfig:
    """Build the config from a mapping, naming the offending key when it is invalid; a key in
    the settings is refused without echoing it."""
    if "api_key" in settings:
        raise ConfigError(
            "an azure judge takes no 'api_key' setting: put the key in an environment variable "
            "and name it with api_key_env (default AZURE_OPENAI_API_KEY)"
        )
    try:
        return AzureJudgeConfig.model_validate(settings)
    except ValidationError as error:
        raise ConfigError(
            f"invalid azure judge settings: {invalid_settings(error, AzureJudgeConfig)}"
        ) from None
