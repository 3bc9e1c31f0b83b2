"""Text analysis for the offline judge: sentences, content terms, numbers, names, negation.

Unicode-aware throughout: words are runs of letters in any script, so accented names and
non-Latin text tokenise; stemming (Snowball's English stemmer) only touches ASCII-letter words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import snowballstemmer

# Numbers keep their separators and a trailing unit-like suffix ("1,200", "3.5", "45%", "10km");
# words are letters in any script, with inner apostrophes ("don't", "o'neill").
_TOKEN = re.compile(r"\d+(?:[.,]\d+)*(?:%|[^\W\d_]{1,3}\b)?|[^\W\d_]+(?:['\u2019][^\W\d_]+)*")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])[\"'\u201d\u2019)\]]*\s+|\s*\n+\s*")
_CLAUSE_BREAK = re.compile(r";\s+|,\s+(?:and|but|while|whereas|although)\s+", re.IGNORECASE)
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
} | {"thirty": "30", "forty": "40", "fifty": "50", "hundred": "100", "dozen": "12"}
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
def term_key(word: str) -> str:
    """The matching key of a lower-cased token: a stem for words, digits only for numbers."""
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
        return str(_STEMMER.stemWord(word))
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


def split_claims(text: str) -> list[str]:
    """Sentences, with compound ones cut at ";", ", and", ", but", ", while" into their facts."""
    return [
        clause.strip()
        for sentence in split_sentences(text)
        for clause in _CLAUSE_BREAK.split(sentence)
        if clause.strip()
    ]


def words(text: str) -> list[str]:
    """Every token of ``text``, stop words included, lower-cased, in order."""
    return [m.group(0).lower().replace("\u2019", "'") for m in _TOKEN.finditer(text)]


def analyse(text: str) -> Analysed:
    """Content terms of ``text``: stop words dropped, numbers, dates and names marked."""
    # Read Penn Treebank bracket tokens as the brackets they stand for, at the same offsets.
    scanned = _PTB_BRACKET.sub(lambda m: _BRACKETS[m.group(1).lower()].ljust(5), text)
    terms: list[Term] = []
    negated = False
    negated_keys: set[str] = set()
    affirmed_keys: set[str] = set()
    scope = 0
    at_sentence_start = True
    previous_end = 0
    for match in _TOKEN.finditer(scanned):
        surface = match.group(0)
        lower = surface.lower().replace("\u2019", "'")
        start = match.start()
        if _PHRASE_BREAK.search(scanned, previous_end, start):
            scope = 0
        previous_end = match.end()
        preceding = scanned[max(0, start - 2) : start]
        sentence_start = at_sentence_start or bool(re.search(r"[.!?:\n]\s*$", preceding))
        at_sentence_start = False
        if lower in NEGATIONS or lower.endswith("n't"):
            negated = True
            scope = _NEGATION_SCOPE
            continue
        if lower in STOP_WORDS:
            continue
        is_number = surface[0].isdigit() or lower in NUMBER_WORDS
        # Days and months are dates however the text is cased: lower-cased system output
        # ("on friday") must meet the same check as cased text ("on Friday").
        is_date = lower in _DATE_NAMES
        # A capitalised word inside a sentence is taken as a name; the first word is ambiguous.
        is_name = not is_number and not is_date and surface[0].isupper() and not sentence_start
        term = Term(surface, term_key(lower), is_number, is_name, is_date)
        terms.append(term)
        unit = lower.lstrip("0123456789.,") if surface[0].isdigit() else ""
        if unit.isalpha() and unit not in STOP_WORDS:
            # "10km" holds the unit "km" as "10 km" does.
            terms.append(Term(unit, term_key(unit), False, False))
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
