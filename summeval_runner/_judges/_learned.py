"""Request parameters a model refuses, learned from its refusals once per model and run.

A new model family refuses some of what older ones took: OpenAI's reasoning models (o-series,
gpt-5.x) take no ``temperature`` but their default (1), and want the reply's bound as
``max_completion_tokens`` instead of ``max_tokens``. Such a refusal is an HTTP 400 that names
the parameter (``param``) and says why (``code``: ``unsupported_value``,
``unsupported_parameter``). The first one met teaches a lesson (``ParameterLessons.learn``):
the parameter is dropped, so that the model's default stands, or renamed; the request is sent
again, and every later request to that model goes without it. A refusal is then not an item's
error, and costs one request per parameter, or at most one per request in flight when the
refusals come together. What was learned is logged once and kept (``lessons()``) for the run's
manifest.

Only what ``ADJUSTABLE`` names is touched: a refusal of anything else (the messages, the
response format, the model itself, ``reasoning_effort`` asked for by the user) stays an error,
as does a 400 that names no parameter. Any provider whose refusals name a parameter can use it:
it gives ``learn`` the refusal's parts and sends ``applied(params)``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from summeval_runner._secrets import scrub

logger = logging.getLogger("summeval_runner")

LessonAction = Literal["dropped", "renamed"]

# What may be done with each parameter a model refuses: None drops it (the model's default
# stands: sampling settings a reasoning model fixes), a name sends the same value under the name
# the model takes. A parameter not named here is never touched.
ADJUSTABLE: Mapping[str, str | None] = {
    "temperature": None,
    "top_p": None,
    "seed": None,
    "presence_penalty": None,
    "frequency_penalty": None,
    "logprobs": None,
    "top_logprobs": None,
    "max_tokens": "max_completion_tokens",
}
# The codes of a refusal that is the parameter's, not the request's: the same parameter would be
# refused in every request to the model.
REFUSAL_CODES = frozenset({"unsupported_value", "unsupported_parameter"})


@dataclass(frozen=True)
class Lesson:
    """What a model refused and what is done about it from then on. ``refused``: the requests
    it refused for it (one, or one per request in flight when the first refusals came)."""

    model: str
    param: str
    action: LessonAction
    code: str
    message: str
    renamed_to: str | None = None
    refused: int = 1

    def apply(self, params: dict[str, Any]) -> None:
        value = params.pop(self.param, None)
        if self.renamed_to is not None and value is not None:
            params.setdefault(self.renamed_to, value)

    def describe(self) -> str:
        if self.renamed_to is not None:
            return f"sends {self.renamed_to} instead of {self.param}"
        return f"sends no {self.param} (the model's default stands)"


class ParameterLessons:
    """The lessons of one run's requests to one endpoint, per model (``model`` of the body)."""

    def __init__(self, where: str) -> None:
        # Who answers (a redacted URL): named in the log line of each lesson.
        self._where = where
        self._lessons: dict[tuple[str, str], Lesson] = {}

    def applied(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` as the model takes them: every lesson of its model applied."""
        sent = dict(params)
        model = str(params.get("model", ""))
        for (learned_for, _), lesson in self._lessons.items():
            if learned_for == model:
                lesson.apply(sent)
        return sent

    def learn(
        self,
        sent: Mapping[str, Any],
        *,
        status: int,
        code: str | None,
        param: str | None,
        message: str,
    ) -> bool:
        """Whether a refusal of ``sent`` is one to learn from (an HTTP 400 for a parameter of
        ``ADJUSTABLE`` that ``sent`` holds): then the caller sends ``applied(params)`` again.

        >>> lessons = ParameterLessons("http://127.0.0.1/v1")
        >>> lessons.learn({"model": "m", "temperature": 0}, status=400,
        ...     code="unsupported_value", param="temperature", message="Only the default (1)")
        True
        >>> lessons.applied({"model": "m", "temperature": 0, "max_tokens": 9})
        {'model': 'm', 'max_tokens': 9}
        >>> lessons.learn({"model": "m", "messages": []}, status=400,
        ...     code="unsupported_value", param="messages", message="no")
        False
        """
        if status != 400 or code is None or code not in REFUSAL_CODES:
            return False
        if param is None or param not in ADJUSTABLE:
            return False
        if param not in sent:
            # Not in what was sent: nothing to drop, and sending it again would loop.
            return False
        model = str(sent.get("model", ""))
        known = self._lessons.get((model, param))
        if known is not None:
            # A request sent before the lesson was learned, refused alike.
            self._lessons[(model, param)] = replace(known, refused=known.refused + 1)
            return True
        renamed_to = ADJUSTABLE[param]
        lesson = Lesson(
            model=model,
            param=param,
            action="dropped" if renamed_to is None else "renamed",
            code=code,
            message=scrub(" ".join(message.split()))[:300],
            renamed_to=renamed_to,
        )
        self._lessons[(model, param)] = lesson
        logger.warning(
            "the model %s at %s refused %s (HTTP 400 %s: %s); this run %s in every request to "
            "it from now on",
            model,
            self._where,
            param,
            code,
            lesson.message,
            lesson.describe(),
        )
        return True

    def lessons(self) -> tuple[Lesson, ...]:
        """Every lesson so far, in the order they were learned."""
        return tuple(self._lessons.values())
