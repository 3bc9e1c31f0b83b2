"""Model prices known by default: the price table the ``genai-prices`` package ships.

Where a judge's (or the LLM summarizer's) ``price`` is not given, the price of a model the table
knows is its price; one it does not know stays unknown ("cost unknown"), and a price given
overrides the table. The table is the one inside the installed package: nothing is fetched at
run time (its ``UpdatePrices`` is never started here). Which table priced a run, and at what, is
in the run's manifest (``judge.price``).

The provider is the one whose API ``base_url`` is (the table's own endpoint patterns: OpenAI's,
Azure's, OpenRouter's, ...); a ``base_url`` the table knows no provider of (a proxy, a local
server, the test suite's) is priced as the judge's provider (``openai``), by the model's name.
A request's price is the table's base rate: a tier for prompts past a threshold (Gemini's past
200,000 tokens) is not applied, judge prompts being far below one.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from summeval_runner._judges._protocol import Price

# Where the price came from when it was given rather than looked up.
GIVEN = "given"


@dataclass(frozen=True)
class KnownPrice:
    """A model's price and where it came from: ``GIVEN`` (the settings' ``price``), or the
    table (``genai-prices 0.2.3``) with the id it knows the model by (``model``)."""

    price: Price
    source: str = GIVEN
    model: str | None = None
    provider: str | None = None


def looked_up_price(judge: object) -> KnownPrice | None:
    """The price table's entry a judge's (or an agent's) ``price`` came from: ``None`` when it
    was given, or is not known."""
    known = getattr(judge, "price_source", None)
    if not isinstance(known, KnownPrice) or known.source == GIVEN:
        return None
    return known if known.price == getattr(judge, "price", None) else None


def table_version() -> str | None:
    """The installed price table's version (``None``: the package is not installed)."""
    try:
        return version("genai-prices")
    except PackageNotFoundError:
        return None


def price_of(
    model: str, *, provider: str, base_url: str | None, given: Price | None
) -> KnownPrice | None:
    """The price a model is counted at: ``given`` if given, else the table's, else ``None``.

    >>> known = price_of("gpt-4o-mini", provider="openai", base_url=None, given=None)
    >>> known.source.split()[0], known.model
    ('genai-prices', 'gpt-4o-mini')
    >>> price_of("a-model-of-my-own", provider="openai", base_url=None, given=None) is None
    True
    """
    if given is not None:
        return KnownPrice(given)
    return _looked_up(model.strip(), provider, base_url)


@lru_cache(maxsize=64)
def _looked_up(model: str, provider: str, base_url: str | None) -> KnownPrice | None:
    try:
        # Imported when a price is looked up: a tenth of a second, which runs with prices
        # given (and the offline judge) do not pay.
        import genai_prices
    except ImportError:  # pragma: no cover - a dependency; an install without it prices nothing
        return None
    nothing = genai_prices.Usage(input_tokens=0, output_tokens=0)
    found: Any = None
    try:
        if base_url:
            found = genai_prices.calc_price(nothing, model, provider_api_url=base_url)
    except LookupError as error:
        if "find provider" not in str(error):
            return None  # the provider is known, and does not sell this model
    try:
        if found is None:
            found = genai_prices.calc_price(nothing, model, provider_id=provider)
    except LookupError:
        return None
    rates = found.model_price
    input_rate, output_rate = _base(rates.input_mtok), _base(rates.output_mtok)
    if input_rate is None or output_rate is None:
        return None
    source = f"genai-prices {table_version()}"
    if found.auto_update_timestamp is not None:
        # Only when the process itself started genai-prices' updater: its table, not ours.
        source += f", updated {found.auto_update_timestamp.isoformat()}"
    return KnownPrice(
        Price(input=input_rate, output=output_rate),
        source=source,
        model=str(found.model.id),
        provider=str(found.provider.id),
    )


def _base(rate: Any) -> float | None:
    """US dollars per million tokens: a flat rate, or a tiered one's base (below its tiers)."""
    if isinstance(rate, Decimal):
        return float(rate)
    base = getattr(rate, "base", None)
    return float(base) if isinstance(base, Decimal) else None
