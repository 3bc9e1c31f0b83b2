"""Word lists of the offline judge: opposites, shared meanings and derivations, all our own.

Small on purpose: each entry is a word pair a news summary swaps (a verdict, a direction, a
result, a role) or rewords (a derivation, a common synonym). Keys are Snowball stems, as the
judge matches on them; the lists are written as words and stemmed once at import.
"""

from __future__ import annotations

import re

import snowballstemmer

_STEMMER = snowballstemmer.stemmer("english")

# Pairs a summary can swap while keeping every other word of the source: a verdict, a result, a
# direction, a role. Each line is a group of words opposed to every word of the other group.
_OPPOSITES = """
guilty convicted convict | innocent acquitted acquit cleared
win won victory winner beat | lose lost defeat loser
rise rose increase increased grow raise higher gain | fall fell decrease decreased decline drop
 dropped cut lower shrink
alive survive survived | dead die died death kill killed
open opened | close closed shut
accept accepted approve approved agree allow allowed | reject rejected refuse refused deny
 denied ban banned block blocked forbid oppose
praise praised support | criticise criticised criticize criticized condemn condemned
buy bought buyer | sell sold seller
hire hired | fire fired sack sacked
arrive arrived enter | leave depart exit
first | last final
best | worst
largest biggest | smallest
oldest older | youngest younger
male man men boy son father husband brother king | female woman women girl daughter mother wife
 sister queen
north northern | south southern
east eastern | west western
home | away
success succeed succeeded | failure fail failed
legal | illegal
confirm confirmed | deny denied
arrested jailed | released freed
victim | suspect attacker
"""

# Words of one meaning in news text, folded to the group's first word.
_SAME_MEANING = """
child children kid kids
car vehicle
buy purchase
start begin launch
help aid assist
big large huge
small little tiny
attack assault
jail prison
sue lawsuit
claim allege
show reveal
police cops
doctor physician
film movie
wed marry married
mother mum mom
father dad
"""

# A verb and its noun: "decision" is "decide", "death" is "die". Snowball leaves these apart.
_DERIVED = """
death:die dead:die died:die killer:kill winner:win loser:lose victory:win
arrival:arrive departure:depart failure:fail
"""
# Latinate nouns in -sion/-ssion stem to "decis", "permiss"; their verbs to "decid", "permit".
_SION = re.compile(r"(?<=[aeiou])s$")
_SSION = re.compile(r"iss$")


def _stem(word: str) -> str:
    return str(_STEMMER.stemWord(word))


def _groups(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines() if line.strip()]


def _opposites(text: str) -> dict[str, frozenset[str]]:
    opposed: dict[str, set[str]] = {}
    for line in re.split(r"\n(?! )", text.strip()):
        left, _, right = line.partition("|")
        lefts = {canonical(_stem(w)) for w in left.split()}
        rights = {canonical(_stem(w)) for w in right.split()}
        for word in lefts:
            opposed.setdefault(word, set()).update(rights - lefts)
        for word in rights:
            opposed.setdefault(word, set()).update(lefts - rights)
    return {word: frozenset(others) for word, others in opposed.items()}


_CANONICAL: dict[str, str] = {}
for _group in _groups(_SAME_MEANING):
    for _word in _group[1:]:
        _CANONICAL.setdefault(_stem(_word), _stem(_group[0]))
for _pair in _DERIVED.split():
    _noun, _, _verb = _pair.partition(":")
    _CANONICAL.setdefault(_stem(_noun), _stem(_verb))


def canonical(stem: str) -> str:
    """The key a stem is matched by: its group's word, or its verb for a derived noun.

    >>> canonical(_stem("decision")) == canonical(_stem("decide"))
    True
    >>> canonical(_stem("permission")) == canonical(_stem("permit"))
    True
    >>> canonical(_stem("vehicle")) == canonical(_stem("car"))
    True
    """
    if stem in _CANONICAL:
        return _CANONICAL[stem]
    if len(stem) >= 5 and _SSION.search(stem):
        return stem[:-2] + "t"
    if len(stem) >= 5 and _SION.search(stem):
        return stem[:-1] + "d"
    return stem


OPPOSITES = _opposites(_OPPOSITES)
