"""The secrets this process knows, and their removal from whatever it writes or prints.

A secret is known from three sources: the values registered when they are read (a judge's or
an agent's API key, from its provider's variable or the one ``api_key_env`` names; the
credentials inside a base URL); the provider key variables, read or not
(``PROVIDER_KEY_VARIABLES``); and, among the other variables whose names say they may hold one
(``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``), the values shaped like a credential
(``credential_shaped``: no space, 16 characters or more, letters and digits). An ordinary word
in such a variable (``CACHE_KEY=approved``) is not a secret: scrubbed, it would rewrite that
word wherever the data holds it. ``scrub`` replaces
every known secret in text about to reach the disk or the screen: the last line of defence, for
a key that arrives where nobody expects it (a server that echoes the ``Authorization`` header
into an error body, a reply quoted in ``error_raw_reply``). ``redact_url`` shows a URL without
its credentials, and ``redact`` blanks the secret-looking keys of a config mapping.

The registry is process-wide on purpose: a key is read where its client is built (deep in a
judge or an agent) and must be scrubbed wherever text is written (the journal, the manifest,
the log, stderr), which share nothing else. It only grows, and it changes no behaviour but
what ``scrub`` removes, so no test or run needs it reset.

A value shorter than ``MIN_SECRET_LENGTH`` characters is never scrubbed on its own, even when
configured as a key: ``scrub`` replaces substrings of whole records, item inputs and outputs
included, and a short value (``EMPTY``, the dummy key local servers take) would rewrite
ordinary words of the data while protecting nothing a guess would not find. The credentials of
a URL are removed from the URL whatever their length (``user:pw@``, ``key=abc``).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, quote_plus, unquote

REDACTED = "***"
MIN_SECRET_LENGTH = 8
# Keys whose values are secrets. "api_key_env" names a variable and is kept: it is not the key.
_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|authorization)$", re.IGNORECASE)
_SECRET_VARIABLE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
# The variables the providers' SDKs read credentials from: scrubbed whether or not this run
# reads them (a key in the environment of a run judged offline is still a key).
PROVIDER_KEY_VARIABLES = frozenset(
    {
        "OPENAI_API_KEY",
        "AZURE_OPENAI_API_KEY",
        "AZURE_OPENAI_AD_TOKEN",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
    }
)
# A credential's shape: one run of 16 or more characters with no space, holding letters and
# digits (API keys, tokens, generated passwords); not a word, a phrase or a short setting.
_CREDENTIAL_SHAPE = re.compile(r"(?=[^\s]*[A-Za-z])(?=[^\s]*[0-9])[^\s]{16,}")
# Query parameters that carry a credential (key=, api_key=, token=, access_token=, sig=, ...).
_SECRET_PARAMETER = re.compile(r"key|token|secret|passw|auth|sig|credential", re.IGNORECASE)
# The user information of a URL in text: "scheme://user:password@". Neither it nor a query
# value runs past a backslash: in JSON text (a manifest) a URL in quotes ends at an escaped
# quote, and the backslash of that escape must survive the redaction or the JSON breaks.
_URL_USERINFO = re.compile(r"(?<=://)[^/?#@\s'\"\\]+@")
_URL_QUERY_PARAMETER = re.compile(r"(?<=[?&;])([^=&#\s'\"\\]+)=([^&#\s'\"\\]*)")
# A command-line override that sets a secret-looking key: "+model.api_key=sk-...".
_SECRET_OVERRIDE = re.compile(
    r"([+~]{0,2}[\w.\-]*(?:api[_-]?key|token|secret|password|authorization))=.+", re.I | re.S
)

# Each known form of a secret, and what replaces it.
_registered: dict[str, str] = {}
_lock = threading.Lock()
# What scrub replaces, as last worked out: every form of every secret (as written and as JSON
# writes it) and its replacement, the longest first; and what it was worked out from. Worked out
# again when a secret is registered, when the environment changes size or a secret-named
# variable its value, and at least every second (a variable renamed in place): scrub runs for
# every journal line, and matching every variable's name each time cost a tenth of a
# millisecond a line.
_ENVIRONMENT_TTL_S = 1.0


@dataclass(frozen=True)
class _WorkedOut:
    version: int
    environment_size: int
    secret_names: tuple[str, ...]
    secret_values: tuple[str | None, ...]
    at: float
    forms: tuple[tuple[str, str], ...]


_worked_out: _WorkedOut | None = None
_version = 0


def _register(form: str, replacement: str = REDACTED) -> None:
    global _version
    if form and form != replacement:
        with _lock:
            if form not in _registered:
                _registered[form] = replacement
                _version += 1


def register_secret(value: str | None) -> None:
    """Scrub ``value`` from everything written or printed from now on in this process.

    Values shorter than ``MIN_SECRET_LENGTH`` are ignored (see the module's docstring).
    """
    if value is None:
        return
    for form in {value, value.strip()}:
        if len(form) >= MIN_SECRET_LENGTH:
            _register(form)


def register_url_secrets(url: str | None) -> None:
    """Scrub the credentials inside ``url`` from everything written or printed from now on.

    The user information (``user:password@``, also as the ``Authorization: Basic`` header that
    carries it) and the values of credential-looking query parameters (``key=``, ``token=``,
    ``api_key=``, ``sig=``) are registered.
    """
    if not url:
        return
    match = _URL_USERINFO.search(url)
    if match is not None:
        userinfo = match.group()[:-1]
        # "user:password@" is unmistakable whatever its length; a bare name ("admin@") would
        # also match e-mail addresses in the data, so it goes only when long enough to be a key.
        if ":" in userinfo or len(userinfo) >= MIN_SECRET_LENGTH:
            _register(f"{userinfo}@", f"{REDACTED}@")
        user, _, password = userinfo.partition(":")
        register_secret(password)
        register_secret(unquote(password))
        basic = f"{unquote(user)}:{unquote(password)}".encode()
        register_secret(base64.b64encode(basic).decode())
    for name, value in _URL_QUERY_PARAMETER.findall(url.split("#", 1)[0]):
        if value and _SECRET_PARAMETER.search(unquote(name)):
            _register(f"{name}={value}", f"{name}={REDACTED}")
            # Every spelling the value may take on its way: as written, decoded, and encoded
            # again the ways HTTP clients do ("/" kept or not, "+" for spaces).
            plain = unquote(value)
            for form in {value, plain, quote(plain, safe=""), quote(plain), quote_plus(plain)}:
                register_secret(form)


def known_secrets() -> dict[str, str]:
    """Every known form of a secret and its replacement, the longest first (a secret that
    contains another is replaced whole)."""
    with _lock:
        forms = dict(_registered)
    for name, value in os.environ.items():
        if _secret_variable(name, value):
            forms.setdefault(value, REDACTED)
    return dict(sorted(forms.items(), key=lambda item: len(item[0]), reverse=True))


def credential_shaped(value: str) -> bool:
    """Whether ``value`` looks like a credential rather than a word: no space, 16 characters or
    more, letters and digits.

    >>> credential_shaped("sk-proj-4f0c2b9e77a1"), credential_shaped("approved")
    (True, False)
    """
    return _CREDENTIAL_SHAPE.fullmatch(value) is not None


def _secret_variable(name: str, value: str) -> bool:
    """Whether an environment variable's value is scrubbed without being registered: a provider
    key variable's, or a credential-shaped value of a variable whose name says it may hold one."""
    if len(value) < MIN_SECRET_LENGTH:
        return False
    if name.upper() in PROVIDER_KEY_VARIABLES:
        return True
    return _SECRET_VARIABLE.search(name) is not None and credential_shaped(value)


def _forms(secrets: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Each secret as written and as JSON writes it (a secret holding a quote or a backslash is
    escaped there), with its replacement, in the secrets' order."""
    forms: list[tuple[str, str]] = []
    for secret, replacement in secrets.items():
        written = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
        forms.extend((form, replacement) for form in sorted(written))
    return tuple(forms)


def _current_forms() -> tuple[tuple[str, str], ...]:
    global _worked_out
    now = time.monotonic()
    cached = _worked_out
    if (
        cached is not None
        and cached.version == _version
        and cached.environment_size == len(os.environ)
        and now - cached.at < _ENVIRONMENT_TTL_S
        and cached.secret_values == tuple(os.environ.get(n) for n in cached.secret_names)
    ):
        return cached.forms
    version, size = _version, len(os.environ)
    names = tuple(name for name in os.environ if _SECRET_VARIABLE.search(name))
    values = tuple(os.environ.get(name) for name in names)
    forms = _forms(known_secrets())
    _worked_out = _WorkedOut(version, size, names, values, now, forms)
    return forms


def scrub(text: str, secrets: Mapping[str, str] | None = None) -> str:
    """``text`` with every known secret replaced by ``***``.

    >>> register_secret("sk-example-0123456789")
    >>> scrub('{"error_message": "bad key Bearer sk-example-0123456789"}')
    '{"error_message": "bad key Bearer ***"}'
    """
    for form, replacement in _current_forms() if secrets is None else _forms(secrets):
        if form in text:
            text = text.replace(form, replacement)
    return text


def redact_url(url: str) -> str:
    """``url`` without its credentials, whatever their length.

    >>> redact_url("http://user:pw@127.0.0.1:8000/v1?api-version=2&key=abc")
    'http://***@127.0.0.1:8000/v1?api-version=2&key=***'
    """
    return redact_urls(url)


def redact_urls(text: str) -> str:
    """``text`` with the credentials of every URL in it removed (its user information, its
    credential-looking query parameters): for configs and messages, never for item data."""
    text = _URL_USERINFO.sub(f"{REDACTED}@", text)

    def parameter(match: re.Match[str]) -> str:
        name = match.group(1)
        if match.group(2) and _SECRET_PARAMETER.search(unquote(name)):
            return f"{name}={REDACTED}"
        return match.group()

    return _URL_QUERY_PARAMETER.sub(parameter, text)


def redact(value: Any) -> Any:
    """``value`` with the value of every secret-looking key replaced by ``***``, and in its
    strings the credentials of every URL and the value of a secret-looking override removed.

    >>> redact({"api_key": "sk-1", "overrides": ["+model.api_key=sk-1", "scorer.scale=5"]})
    {'api_key': '***', 'overrides': ['+model.api_key=***', 'scorer.scale=5']}
    """
    if isinstance(value, Mapping):
        return {
            key: REDACTED if _SECRET_KEY.search(str(key)) and item else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
    if isinstance(value, str):
        override = _SECRET_OVERRIDE.match(value)
        if override is not None:
            return f"{override.group(1)}={REDACTED}"
        return redact_urls(value)
    return value


class ScrubFilter(logging.Filter):
    """A logging filter that scrubs each record's message (and its traceback) of secrets."""

    def filter(self, record: logging.LogRecord) -> bool:
        scrub_record(record)
        return True


def scrub_record(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` with its message and traceback formatted now and scrubbed of secrets."""
    message = record.getMessage()
    record.msg, record.args = scrub(redact_urls(message)), None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = scrub(redact_urls(record.exc_text))
    if record.stack_info:
        record.stack_info = scrub(redact_urls(record.stack_info))
    return record


# The package's own log records, whoever configured logging (summeval-run, or a user's script).
logging.getLogger("summeval_runner").addFilter(ScrubFilter())
