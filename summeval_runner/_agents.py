"""Bundled agents under test: a lead-k extractive baseline and an LLM summarizer (an
OpenAI-compatible endpoint, Anthropic's Messages API, or Gemini's generateContent).

Both are classes built once per run (Hydra's ``instantiate``) and called once per item with the
item's input, so their parameters sweep as variants (``target.k=2,3``) and the LLM summarizer
keeps one HTTP client for the whole run.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from summeval_runner._errors import (
    AgentAPIError,
    AgentAuthError,
    AgentConnectionError,
    ConfigError,
    JudgeAuthError,
    JudgeConnectionError,
    JudgeError,
)
from summeval_runner._judges._anthropic import AnthropicMessages
from summeval_runner._judges._google import GeminiChat, GeminiReply
from summeval_runner._judges._openai import OpenAIChat
from summeval_runner._judges._prices import price_of
from summeval_runner._judges._protocol import FREE, JudgeReply, Price, TokenUsage
from summeval_runner._judges._request import estimate_tokens
from summeval_runner._judges._text import split_sentences
from summeval_runner._messages import extract_source
from summeval_runner._runner._cache import AgentCache
from summeval_runner._scorers._result import report_target_usage

DEFAULT_SUMMARY_PROMPT = (
    "Summarize the user's text in at most three sentences. Keep the most important facts, "
    "numbers and names exactly as the text gives them, and add nothing the text does not say."
)


# Whom the LLM summarizer's errors name.
AGENT_MODEL = "the agent's model"
# The providers the LLM summarizer speaks to, and the variable each reads its key from when
# api_key_env is left at DEFAULT_KEY (so that -m target.provider=openai,anthropic needs no
# other setting).
DEFAULT_KEY = "default"
PROVIDER_KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "google": None}
# The model each provider's summarizer runs when no name is given (target.name null): a sweep
# over target.provider sends each provider a model it serves, not OpenAI's name to Anthropic.
PROVIDER_MODELS = {
    "openai": "gpt-4o-mini",
    "anthropic": "claude-haiku-4-5",
    "google": "gemini-2.5-flash",
}


class LeadK:
    """The first ``k`` sentences of the source: the classic news baseline.

    >>> LeadK(k=2)("One. Two. Three.")
    'One. Two.'
    """

    def __init__(self, k: int = 3, max_words: int | None = None) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"target.k must be an integer >= 1, got {k!r}")
        if max_words is not None and max_words < 1:
            raise ConfigError(f"target.max_words must be >= 1 or null, got {max_words!r}")
        self.k = k
        self.max_words = max_words
        # It reads the text on this machine: its calls cost nothing.
        self.price = FREE

    def __call__(self, input: Any) -> str:
        summary = " ".join(split_sentences(extract_source(input))[: self.k])
        if self.max_words is not None:
            summary = " ".join(summary.split()[: self.max_words])
        return summary


class LLMSummarizer:
    """Summarizes with a model behind an OpenAI-compatible endpoint (``provider="openai"``) or
    Anthropic's Messages API (``provider="anthropic"``: the anthropic SDK, an optional extra);
    the judge's provider code, its errors translated alike. ``name`` is the model; ``None`` is
    the provider's default (``PROVIDER_MODELS``: gpt-4o-mini, claude-haiku-4-5, gemini-2.5-flash).

    ``api_key_env`` names the variable that holds the key: ``"default"`` is the provider's
    (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``), ``None`` sends none. On Anthropic the prompt is
    the top-level system prompt, ``max_tokens`` is sent as it is, and ``temperature`` is not
    sent (the Messages API takes no sampling setting). On Google (``provider="google"``: the
    google-genai SDK, an optional extra) the prompt is the system instruction, ``max_tokens``
    the ``maxOutputTokens``, and the default key ``GOOGLE_API_KEY``, else ``GEMINI_API_KEY``, as
    the SDK reads them; a reply Gemini blocked is the item's error.

    ``prompt`` is the system prompt; the item's source is the user message. ``price`` is the
    model's price per million tokens (``{input: ..., output: ...}`` US dollars; ``None``: the
    price table's for a model it knows, else not known): each call's tokens and cost are
    reported to the run, which counts them apart from the judge's. A sampling setting the model
    refuses (a reasoning model's ``temperature``, its ``max_tokens``) is dropped or renamed once
    it refuses it, as the judge's are.

    In a run its calls are kept in the run's response cache (``with_cache``), keyed by the
    endpoint, the model, the prompt, the sampling settings and the input: a rerun that changes
    only the judge or the scorer judges the same summaries and calls no model. A call the
    cache answers reports its tokens and costs 0 (at a known price; without one, its cost is
    not known).
    """

    def __init__(
        self,
        name: str | None = None,
        prompt: str = DEFAULT_SUMMARY_PROMPT,
        base_url: str | None = None,
        api_key_env: str | None = DEFAULT_KEY,
        temperature: float = 0.0,
        max_tokens: int = 300,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        price: Price | Mapping[str, float] | None = None,
        provider: str = "openai",
    ) -> None:
        if provider not in PROVIDER_KEYS:
            raise ConfigError(
                f"target.provider must be one of: {', '.join(PROVIDER_KEYS)}; got {provider!r}"
            )
        if name is None:
            name = PROVIDER_MODELS[provider]
        if not name:
            raise ConfigError("target.name must name the summarizer's model, got an empty string")
        if not prompt.strip():
            raise ConfigError("target.prompt must be a non-blank system prompt")
        self.name = name
        self.prompt = prompt
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.provider = provider
        # Google's default (None): GOOGLE_API_KEY, else GEMINI_API_KEY, as its SDK reads them.
        key_env = PROVIDER_KEYS[provider] if api_key_env == DEFAULT_KEY else api_key_env
        endpoint: type[OpenAIChat | AnthropicMessages | GeminiChat] = (
            OpenAIChat
            if provider == "openai"
            else AnthropicMessages
            if provider == "anthropic"
            else GeminiChat
        )
        self._chat: OpenAIChat | AnthropicMessages | GeminiChat = endpoint(
            base_url=base_url,
            api_key_env=key_env,
            timeout_s=timeout_s,
            max_retries=max_retries,
            who=AGENT_MODEL,
        )
        # The price given, else the price table's for a model it knows (the judge's rule).
        self.price_source = price_of(
            name, provider=provider, base_url=self._chat.base_url, given=_price(price)
        )
        self.price = self.price_source.price if self.price_source is not None else None
        self._cache: AgentCache | None = None

    def with_cache(self, cache: AgentCache) -> LLMSummarizer:
        """This summarizer with its calls kept in ``cache`` (the run's, given by ``run_evals``);
        it shares this one's HTTP client, which this one closes."""
        cached = copy.copy(self)
        cached._cache = cache
        return cached

    def _request(self, source: str) -> dict[str, Any]:
        """The request its provider is sent for ``source``."""
        if self.provider == "anthropic":
            return {
                "model": self.name,
                "max_tokens": self.max_tokens,
                "system": self.prompt,
                "messages": [{"role": "user", "content": source}],
            }
        return {
            "model": self.name,
            "messages": [
                {"role": "system", "content": self.prompt},
                {"role": "user", "content": source},
            ],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }

    async def __call__(self, input: Any) -> str:
        request = self._request(extract_source(input))
        sent = False

        async def send() -> JudgeReply:
            nonlocal sent
            sent = True
            return await self._send(request)

        if self._cache is None:
            reply = await send()
        else:
            # What decides the reply besides the request: where the model is served.
            identity = {"provider": self.provider, "base_url": self._chat.base_url}
            reply = await self._cache.complete(identity, request, send)
        report_target_usage(
            input_tokens=reply.usage.input_tokens,
            output_tokens=reply.usage.output_tokens,
            # A cached call costs nothing at a known price; without one, its cost is not known.
            cost=reply.cost if self.price is not None else None,
            cached=not sent,
        )
        return str(reply.content)

    async def _send(self, request: dict[str, Any]) -> JudgeReply:
        try:
            if isinstance(self._chat, OpenAIChat | GeminiChat):
                # Gemini's takes the same request (GeminiChat turns it into its own).
                chat = await self._chat.complete(request)
                if isinstance(chat, GeminiReply) and chat.blocked is not None:
                    raise AgentAPIError(
                        f"{AGENT_MODEL} gave no summary: Gemini blocked it ({chat.blocked})"
                    )
                if (
                    isinstance(chat, GeminiReply)
                    and chat.finish == "MAX_TOKENS"
                    and not chat.content
                ):
                    # A thinking model's thoughts count against the bound, and can take it all.
                    thoughts = chat.usage.reasoning_tokens if chat.usage else 0
                    raise AgentAPIError(
                        f"{AGENT_MODEL} wrote no summary within target.max_tokens "
                        f"({self.max_tokens}; {thoughts} of them thoughts): raise target.max_tokens"
                    )
                content, usage, cost = chat.content, chat.usage, chat.cost(self.price)
            else:
                message = await self._chat.create(request, tool=None)
                content, usage, cost = str(message.content), message.usage, message.cost(self.price)
        except JudgeAuthError as error:
            raise AgentAuthError(str(error), status_code=error.status_code) from error
        except JudgeConnectionError as error:
            # Never reached: the run's outage watch holds the agent's calls and probes.
            raise AgentConnectionError(str(error)) from error
        except JudgeError as error:
            # The endpoint's failure, named as the agent's: the judge was never asked.
            raise AgentAPIError(
                str(error), status_code=getattr(error, "status_code", None)
            ) from error
        return JudgeReply(content=content, usage=usage or TokenUsage(), cost=cost)

    def estimate_usage(self, input: Any, summary: str) -> tuple[TokenUsage, float | None]:
        """A call's tokens and cost before it is made, for ``estimate_evals``: its prompt at four
        bytes of text a token, and a reply as long as ``summary``."""
        usage = TokenUsage(
            estimate_tokens([self.prompt, extract_source(input)]), estimate_tokens([summary])
        )
        return usage, self.price.cost(usage) if self.price is not None else None

    async def aclose(self) -> None:
        await self._chat.aclose()


def _price(price: Price | Mapping[str, float] | None) -> Price | None:
    if price is None or isinstance(price, Price):
        return price
    try:
        return Price.model_validate(dict(price))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise ConfigError(
            f"target.price.{where} {first['msg'].lower()}, got {first.get('input')!r}; a price is "
            "{input: ..., output: ...} in US dollars per million tokens"
        ) from None
