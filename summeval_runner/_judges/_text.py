"""Text analysis for the offline judge: sentences, content terms, numbers, names, negation.

Unicode-aware throughout: words are runs of letters in any script, so accented names and
non-Latin text tokenise; stemming (Snowball's English stemmer) only touches ASCII-letter words.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

import snowballstemmer

from summeval_runner._judges._lexicon import canonical

# Numbers keep their separators and a trailing unit-like suffix ("1,200", "3.5", "45%", "10km");
# words are letters in any script, with inner apostrophes ("don't", "o'neill").
_TOKEN = re.compile(r"\d+(?:[.,]\d+)*(?:%|[^\W\d_]{1,3}\b)?|[^\W\d_]+(?:['\u2019][^\W\d_]+)*")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])[\"'\u201d\u2019)\]]*\s+|\s*\n+\s*")
_CLAUSE_BREAK = re.compile(r";\s+|,\s+(?:and|but|while|whereas|although)\s+", re.IGNORECASE)
_FINE_BREAK = re.compile(
    r"[;,:]\s+(?:(?:and|but|while|whereas|although)\s+)?|\s+[-\u2013\u2014]+\s+"
    r"|\s+(?=(?:and|but|who|which|whose|whereas|although|because|after|before|when|while)\s)",
    re.IGNORECASE,
)
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st sen rep gov gen col lt sgt jr sr inc ltd co corp no vs etc u.s u.k"
    " jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
NEGATIONS = frozenset(
    "not no never none nobody nothing neither nor without cannot n't isn't wasn't aren't"
    " weren't don't doesn't didn't won't wouldn't can't couldn't shouldn't hasn't haven't"
    " hadn't".split()
)
STOP_WORDS = frozenset(
    "a about above after again against all also am an and any are as at be because been"
    " before being below between both but by can could did do does doing down during each few"
    " for from further had has have having he her here hers herself him himself his how i if"
    " in into is it its itself just me more most my myself of off on once only or other our"
    " ours ourselves out over own same she should so some such than that the their theirs them"
    " themselves then there these they this those through to too under until up very was we"
    " were what when where which while who whom why will with would you your yours yourself"
    " yourselves said says say told according may might must shall one s t m ll re ve d".split()
)
# Number words are numbers: "three schools" must not support "five schools", and "3" is "three".
NUMBER_WORDS = {
    word: str(value)
    for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
        " fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
} | {
    "thirty": "30",
    "forty": "40",
    "fifty": "50",
    "sixty": "60",
    "seventy": "70",
    "eighty": "80",
    "ninety": "90",
    "hundred": "100",
    "dozen": "12",
}
_SCALES = {
    "hundred": Decimal(100),
    "thousand": Decimal(1000),
    "million": Decimal(10**6),
    "billion": Decimal(10**9),
    "trillion": Decimal(10**12),
    "bn": Decimal(10**9),
}
# "5m" is five metres, "$5m" five million dollars: a money sign makes the short scales scales.
_MONEY_SCALES = {"m": Decimal(10**6), "k": Decimal(1000), "b": Decimal(10**9)}
_CURRENCY = {"$": "dollar", "£": "pound", "€": "euro"}
_PER_CENT = frozenset({"percent", "pc"})
_ORDINALS = frozenset({"st", "nd", "rd", "th"})
_TENS = frozenset(Decimal(n) for n in range(20, 100, 10))
_NUMBER_GLUE = re.compile(r"[\s-]{1,2}")
_AFTER_SENTENCE_END = re.compile(r"[.!?:\n]\s*$")
# Days and months ("may" and "march" are also common words, and stay words).
_DATE_NAMES = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday january february april june july"
    " august september october november december".split()
)
# Content words a negation governs: its head ("not rise", "nothing wrong", "never encountered");
# words further on are too often another phrase's in run-on news text. And what ends a phrase.
_NEGATION_SCOPE = 1
_PHRASE_BREAK = re.compile(r"[,;:.!?()\[\]\u2014]|\s(?:but|and|while|whereas|although)\s")
# Irregular English verbs: base, past, past participle. The stemmer folds "played" into "play"
# but cannot see that "stole" is "steal"; summaries change tense all the time.
_IRREGULAR_VERBS = """
arise arose arisen; awake awoke awoken; be was were been; bear bore borne; beat beat beaten;
become became become; begin began begun; bend bent bent; bet bet bet; bid bid bid;
bind bound bound; bite bit bitten; bleed bled bled; blow blew blown; break broke broken;
breed bred bred; bring brought brought; build built built; burn burnt burnt; buy bought bought;
catch caught caught; choose chose chosen; come came come; cost cost cost; creep crept crept;
cut cut cut; deal dealt dealt; dig dug dug; do did done; draw drew drawn; dream dreamt dreamt;
drink drank drunk; drive drove driven; eat ate eaten; fall fell fallen; feed fed fed;
feel felt felt; fight fought fought; find found found; flee fled fled; fly flew flown;
forbid forbade forbidden; forget forgot forgotten; forgive forgave forgiven; freeze froze frozen;
get got gotten; give gave given; go went gone; grow grew grown; hang hung hung; have had had;
hear heard heard; hide hid hidden; hit hit hit; hold held held; hurt hurt hurt; keep kept kept;
know knew known; lay laid laid; lead led led; leave left left; lend lent lent; let let let;
lie lay lain; light lit lit; lose lost lost; make made made; mean meant meant; meet met met;
pay paid paid; put put put; quit quit quit; read read read; ride rode ridden; ring rang rung;
rise rose risen; run ran run; say said said; see saw seen; seek sought sought; sell sold sold;
send sent sent; set set set; shake shook shaken; shine shone shone; shoot shot shot;
show showed shown; shrink shrank shrunk; shut shut shut; sing sang sung; sink sank sunk;
sit sat sat; sleep slept slept; slide slid slid; speak spoke spoken; spend spent spent;
spin spun spun; split split split; spread spread spread; spring sprang sprung; stand stood stood;
steal stole stolen; stick stuck stuck; sting stung stung; strike struck struck; swear swore sworn;
sweep swept swept; swim swam swum; swing swung swung; take took taken; teach taught taught;
tear tore torn; tell told told; think thought thought; throw threw thrown; understand understood
understood; wake woke woken; wear wore worn; weep wept wept; win won won; withdraw withdrew
withdrawn; write wrote written; overtake overtook overtaken; undergo underwent undergone;
mislead misled misled; oversee oversaw overseen; uphold upheld upheld; withhold withheld withheld
"""
_VERB_BASE = {
    form: forms.split()[0]
    for forms in _IRREGULAR_VERBS.replace("\n", " ").split(";")
    if forms.split()
    for form in forms.split()[1:]
    # "lay" is both a base and lie's past, "saw" a tool, "left" a side, "found" a verb of its own:
    # a form that is also a common word of its own keeps its own meaning.
    if form not in {"lay", "saw", "left", "found", "lit", "ground", "bound", "rose", "fell"}
}
# System output tokenised the Penn Treebank way writes brackets as words: "-lrb- cnn -rrb-".
_PTB_BRACKET = re.compile(r"-(lrb|rrb|lsb|rsb|lcb|rcb)-", re.IGNORECASE)
_BRACKETS = {"lrb": "(", "rrb": ")", "lsb": "[", "rsb": "]", "lcb": "{", "rcb": "}"}
_CLITICS = frozenset({"s", "", "m", "ll", "re", "ve", "d"})
_STEMMER = snowballstemmer.stemmer("english")
_ASCII_WORD = re.compile(r"[a-z]+")


@lru_cache(maxsize=65536)
def term_key(word: str, lexicon: bool = True) -> str:
    """The matching key of a lower-cased token: a stem for words, digits only for numbers.

    With ``lexicon``, a derived noun is matched by its verb ("decision" by "decide") and a word
    of a shared meaning by its group's word ("vehicle" by "car").
    """
    if word[0].isdigit():
        return normalise_number(word)
    if word in NUMBER_WORDS:
        return NUMBER_WORDS[word]
    if "'" in word:
        # "bruce's" is "bruce", "players'" is "players", "we'll" is "we": the clitic is not
        # content, and tokenised output splits it off ("bruce 's", "we 'll").
        head, _, clitic = word.rpartition("'")
        if head and clitic in _CLITICS:
            word = head
    word = _VERB_BASE.get(word, word)
    if _ASCII_WORD.fullmatch(word):
        stem = str(_STEMMER.stemWord(word))
        return canonical(stem) if lexicon else stem
    return word


def normalise_number(token: str) -> str:
    """``"1,200"`` and ``"1200"`` are the same number; ``"3.50"`` and ``"3.5"`` too."""
    match = re.match(r"[\d.,]+", token)
    digits = match.group(0) if match else token
    if re.fullmatch(r"\d{1,3}(,\d{3})+(\.\d+)?", digits):
        digits = digits.replace(",", "")
    if "." in digits:
        digits = digits.rstrip("0").rstrip(".")
    return digits


@dataclass(frozen=True)
class Term:
    """A content token: its surface form and its matching key."""

    surface: str
    key: str
    is_number: bool
    is_name: bool
    is_date: bool = False


@dataclass(frozen=True)
class Analysed:
    """A text reduced to what matching needs."""

    text: str
    terms: tuple[Term, ...]
    keys: frozenset[str]
    negated: bool
    # Keys of the terms a negation denies: the content word right after "not", "no", "never"...
    # within its phrase. "not moving at all" denies "moving", not the whole sentence.
    negated_keys: frozenset[str] = frozenset()


def split_sentences(text: str) -> list[str]:
    """Sentences, with common abbreviations kept whole."""
    pieces = [piece.strip() for piece in _SENTENCE_BREAK.split(text) if piece and piece.strip()]
    sentences: list[str] = []
    for piece in pieces:
        if sentences:
            last_word = sentences[-1].rsplit(None, 1)[-1].rstrip(".").lower()
            if last_word in _ABBREVIATIONS or len(last_word) == 1:
                sentences[-1] = f"{sentences[-1]} {piece}"
                continue
        sentences.append(piece)
    return sentences


def split_claims(text: str, *, fine: bool = False, min_terms: int = 2) -> list[str]:
    """Sentences, with compound ones cut at ";", ", and", ", but", ", while" into their facts.

    With ``fine``, also at every comma, dash and colon, at "and", "but" and the words that open
    a relative or adverbial clause ("who", "which", "after", "because"...), so that an
    appositive, a relative clause or a second predicate is a fact of its own; a piece with
    fewer than ``min_terms`` content words ("Smith", "he said") stays with the piece before it.
    """
    if not fine:
        return [
            clause.strip()
            for sentence in split_sentences(text)
            for clause in _CLAUSE_BREAK.split(sentence)
            if clause.strip()
        ]
    claims: list[str] = []
    for sentence in split_sentences(text):
        # Each piece keeps the separator after it, so a merged piece reads as the text did.
        cuts = [m.end() for m in _FINE_BREAK.finditer(sentence)]
        pieces = [sentence[a:b] for a, b in zip([0, *cuts], [*cuts, len(sentence)], strict=True)]
        merged: list[str] = []
        for piece in pieces:
            if merged and min(_content_count(piece), _content_count(merged[-1])) < min_terms:
                merged[-1] += piece
            else:
                merged.append(piece)
        claims.extend(c.strip().rstrip(",;:-\u2013\u2014").strip() for c in merged if c.strip())
    return claims


def _content_count(text: str) -> int:
    return sum(1 for w in words(text) if w not in STOP_WORDS and w not in NEGATIONS)


def words(text: str) -> list[str]:
    """Every token of ``text``, stop words included, lower-cased, in order."""
    return [m.group(0).lower().replace("\u2019", "'") for m in _TOKEN.finditer(text)]


class _RecentAnalyses:
    """The analyses of the texts met last, held up to a budget of characters (least recently
    used out first). A run meets the same texts again and again: a source at each of its
    items' steps, and at each summary of it when several systems' summaries are judged. The
    budget, not a count, bounds the memory: an analysis takes about 24 bytes a character of
    its text (4.7 MB for a 197,701-character text, tracemalloc), so a count of long documents
    would not be bounded."""

    def __init__(self, budget_chars: int) -> None:
        self.budget_chars = budget_chars
        self.held_chars = 0
        self._held: OrderedDict[tuple[str, bool, bool], Analysed] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, bool, bool], analysed: Callable[[], Analysed]) -> Analysed:
        with self._lock:
            found = self._held.get(key)
            if found is not None:
                self._held.move_to_end(key)
                return found
        result = analysed()
        size = _held_size(key)
        if size > self.budget_chars:
            return result
        with self._lock:
            if key not in self._held:
                self._held[key] = result
                self.held_chars += size
                while self.held_chars > self.budget_chars:
                    gone, _ = self._held.popitem(last=False)
                    self.held_chars -= _held_size(gone)
        return result


def _held_size(key: tuple[str, bool, bool]) -> int:
    return len(key[0]) + 64  # the text, and what an entry costs besides (in characters' worth)


# 2 million characters: about 48 MB of analyses. `python bench/offline_reuse.py [--data ...]`
# (2026-12-07, the offline judge on every summary of a development half): summeval_dev.jsonl,
# 800 summaries of 50 sources, 6.6 s with nothing kept and 5.1 s kept; realsumm_dev.jsonl,
# 1,200 of 50, 9.6 s and 6.1 s; the same scores.
_RECENT = _RecentAnalyses(budget_chars=2_000_000)


def analyse(text: str, *, lexicon: bool = True, numbers: bool = True) -> Analysed:
    """Content terms of ``text``: stop words dropped, numbers, dates and names marked (an
    analysis met recently is given again: it is immutable).

    With ``numbers``, a number phrase is one term of one value, however it is written:
    "2 million", "2,000,000" and "two million" are "2000000"; "$5m" is "5000000" and "dollar";
    "3rd" is "3"; "twenty-five" is "25"; "50 per cent" is "50" as "50%" is.
    """
    return _RECENT.get(
        (text, lexicon, numbers), lambda: _analysed(text, lexicon=lexicon, numbers=numbers)
    )


def _analysed(text: str, *, lexicon: bool, numbers: bool) -> Analysed:
    # Read Penn Treebank bracket tokens as the brackets they stand for, at the same offsets.
    scanned = _PTB_BRACKET.sub(lambda m: _BRACKETS[m.group(1).lower()].ljust(5), text)
    terms: list[Term] = []
    negated = False
    negated_keys: set[str] = set()
    affirmed_keys: set[str] = set()
    scope = 0
    at_sentence_start = True
    previous_end = 0
    tokens = list(_TOKEN.finditer(scanned))
    index = 0
    while index < len(tokens):
        match = tokens[index]
        index += 1
        surface = match.group(0)
        lower = surface.lower().replace("\u2019", "'")
        start = match.start()
        # Searched only while a negation is open: most tokens are read outside any.
        if scope and _PHRASE_BREAK.search(scanned, previous_end, start):
            scope = 0
        previous_end = match.end()
        first_token, at_sentence_start = at_sentence_start, False
        if lower in NEGATIONS or lower.endswith("n't"):
            negated = True
            scope = _NEGATION_SCOPE
            continue
        if lower in STOP_WORDS:
            continue
        sentence_start = first_token or bool(
            _AFTER_SENTENCE_END.search(scanned, max(0, start - 2), start)
        )
        is_number = surface[0].isdigit() or lower in NUMBER_WORDS
        extra: list[Term] = []
        if is_number and numbers:
            phrase = _number_phrase(scanned, tokens, index - 1)
            index += phrase.consumed
            previous_end = tokens[index - 1].end()
            term = Term(phrase.surface, phrase.key, True, False)
            extra = [Term(w, term_key(w, lexicon), False, False) for w in phrase.words]
        else:
            # Days and months are dates however the text is cased: lower-cased system output
            # ("on friday") must meet the same check as cased text ("on Friday").
            is_date = lower in _DATE_NAMES
            # A capitalised word inside a sentence is taken as a name; the first is ambiguous.
            is_name = not is_number and not is_date and surface[0].isupper() and not sentence_start
            term = Term(surface, term_key(lower, lexicon), is_number, is_name, is_date)
            unit = lower.lstrip("0123456789.,") if surface[0].isdigit() else ""
            if unit.isalpha() and unit not in STOP_WORDS:
                # "10km" holds the unit "km" as "10 km" does.
                extra = [Term(unit, term_key(unit, lexicon), False, False)]
        terms.append(term)
        terms.extend(extra)
        if scope:
            # A name is who the phrase is about, not what it denies ("without a trophy Liverpool
            # were knocked out": the caption runs on, the name starts a new phrase).
            if term.is_name:
                scope = 0
            else:
                negated_keys.add(term.key)
                scope -= 1
        else:
            affirmed_keys.add(term.key)
    keys = frozenset(t.key for t in terms)
    # A word the text also states plainly is not one it denies.
    denied = frozenset(negated_keys - affirmed_keys)
    return Analysed(text, tuple(terms), keys, negated, denied)


@dataclass(frozen=True)
class _NumberPhrase:
    surface: str
    key: str
    consumed: int
    # Words the phrase also says: its currency ("$" is "dollar") or its unit ("10km" is "km").
    words: tuple[str, ...]


def _number_phrase(text: str, tokens: list[re.Match[str]], index: int) -> _NumberPhrase:
    """The number that starts at ``tokens[index]``, with the scale, tens or per cent after it."""
    first = tokens[index]
    lower = first.group(0).lower()
    currency = _CURRENCY.get(text[max(0, first.start() - 1) : first.start()], "")
    if lower[0].isdigit():
        digits = normalise_number(lower)
        suffix = lower.lstrip("0123456789.,")
    else:
        digits, suffix = NUMBER_WORDS[lower], ""
    try:
        value = Decimal(digits)
    except ArithmeticError:
        return _NumberPhrase(first.group(0), digits, 0, ())
    said = [currency] if currency else []
    if suffix in _SCALES or (currency and suffix in _MONEY_SCALES):
        value *= _SCALES.get(suffix) or _MONEY_SCALES[suffix]
    elif suffix.isalpha() and suffix not in STOP_WORDS and suffix not in _ORDINALS:
        said.append(suffix)
    end = index
    while end + 1 < len(tokens) and _NUMBER_GLUE.fullmatch(
        text, tokens[end].end(), tokens[end + 1].start()
    ):
        following = tokens[end + 1].group(0).lower()
        if following in _SCALES and following.isalpha():
            value *= _SCALES[following]
        elif following in _PER_CENT:
            pass
        elif following == "per" and end + 2 < len(tokens) and tokens[end + 2].group(0) == "cent":
            end += 1
        elif value in _TENS and following in NUMBER_WORDS and int(NUMBER_WORDS[following]) < 10:
            value += int(NUMBER_WORDS[following])
        else:
            break
        end += 1
    surface = text[first.start() : tokens[end].end()]
    return _NumberPhrase(surface, format(value.normalize(), "f"), end - index, tuple(said))


def quote(words: list[str], limit: int = 4) -> str:
    """``'a', 'b' and 'c'`` for a reason, at most ``limit`` words."""
    unique = list(dict.fromkeys(words))[:limit]
    quoted = [f"'{word}'" for word in unique]
    if len(quoted) <= 1:
        return "".join(quoted)
    return f"{', '.join(quoted[:-1])} and {quoted[-1]}"


def shorten(text: str, limit: int = 80) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters, with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0] + "…"
