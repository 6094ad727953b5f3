"""English and Portuguese pattern tables of the offline extraction rules.

Everything here is data: compiled trigger regexes with the attribute key, relation type and
target type they imply, the kinship and pet nouns, the verb tables that turn first-person
statements into third-person ones, and small lexicons (professions, places, company
suffixes) that type the capitalised names :mod:`.text` finds. The logic that applies the
tables lives in :mod:`.extraction`.

A trigger regex matches the words *before* the target (``"moro em "``, ``"works at "``);
the target is the name that starts where the match ends. Patterns with an ``obj`` group
(occupations, likes) capture a lower-case object instead, and use a name only when the
object starts with one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from memory_core.cognition.models import ImportanceCategory
from memory_core.cognition.offline.text import Language, fold_word
from memory_core.write.naming import fold

__all__ = [
    "ADVERBS_EN",
    "ADVERBS_PT",
    "AMBIGUOUS_PT_FIRST_PERSON",
    "ARTICLES",
    "EN_FIRST_TO_THIRD",
    "EN_KEEP_AFTER_I",
    "EXCLUDED_OBJECTS",
    "FUTURE",
    "FUTURE_TIME",
    "HABITUAL",
    "HAVE_VERBS",
    "HEDGE",
    "INDIRECT_PT_VERBS",
    "KIN",
    "LIKE_BLOCKERS",
    "MILESTONE",
    "NEGATIONS",
    "ORG_PREFIXES",
    "ORG_SUFFIXES",
    "PATTERNS",
    "PLACE_NAMES",
    "PLACE_PREFIXES",
    "PRE_NOMINAL",
    "PROFESSIONS",
    "PT_AFTER_AMBIGUOUS_VERB",
    "PT_FIRST_TO_THIRD",
    "RETRACTION",
    "SPECULATION",
    "TEMPORAL",
    "KinSpec",
    "PatternIndex",
    "RelationPattern",
    "TargetCondition",
    "TargetRule",
    "is_profession",
    "pt_first_to_third",
]


def _words(blob: str) -> frozenset[str]:
    return frozenset(fold(word) for word in blob.split())


def _raw_words(blob: str) -> frozenset[str]:
    """Words as written (accents kept: "tô" is unambiguous where "to" is not)."""
    return frozenset(blob.split())


# --- trigger patterns ------------------------------------------------------------------

TargetRule = Literal["name", "object", "profession", "role"]
# Conditions on the static type evidence of the target name, checked before the pattern types it:
# "not_org" keeps "moved to Orion Tech" out of residence, "org_or_role" lets "foi pra X" mean a job
# only for a company or when a role follows ("como head de..."), "not_place" keeps "left Paris" out
# of employment, "not_person" keeps "joined Ana" out of it too.
TargetCondition = Literal["any", "not_org", "not_org_person", "not_place", "not_place_person", "org_or_role", "org"]


@dataclass(frozen=True, slots=True)
class RelationPattern:
    """One trigger: what a match means for the attribute key, the relation and the target's type."""

    kind: str
    language: Language
    regex: re.Pattern[str]
    attribute_key: str | None
    relation: str | None
    target_type: str | None
    category: ImportanceCategory
    target: TargetRule = "name"
    condition: TargetCondition = "any"
    milestone: bool = False
    # The same pattern, case-sensitive and without its leading \b, for lower-cased text: the regex
    # engine can then skip positions by their first character (about 3x faster than ``regex``).
    fast: re.Pattern[str] | None = None
    # Lower-case literal beginnings of the trigger's alternatives ("moro", "mudei"...): when no word
    # of a sentence starts with one, the regex cannot match and is not run (see PatternIndex).
    prefixes: tuple[str, ...] | None = None

    def finditer(self, text: str, lowered: str | None) -> Iterator[re.Match[str]]:
        """Non-overlapping matches, like ``regex.finditer(text)``.

        ``lowered`` is ``text.lower()`` when that keeps every position (then the faster form
        runs on it and match groups come back lower-cased), else None.
        """
        if lowered is None or self.fast is None:
            yield from self.regex.finditer(text)
            return
        position = 0
        while True:
            match = self.fast.search(lowered, position)
            if match is None:
                return
            start = match.start()
            if start > 0 and (lowered[start - 1].isalnum() or lowered[start - 1] == "_"):
                position = start + 1  # not at a word boundary: what \b would have refused
                continue
            yield match
            position = max(match.end(), start + 1)


_OBJ = r"(?P<obj>[^\s,.;:!?()\"]+(?:[ \t]+[^\s,.;:!?()\"]+){0,4})"
_ROLE = r"(?P<obj>[^\s,.;:!?()\"]+(?:[ \t]+[^\s,.;:!?()\"]+){0,3})"
_THE = r"(?:the\s+)?"
_O_A = r"(?:(?:o|a|os|as)\s+)?"


# (attribute key, relation type, target type, importance category) of a family of patterns.
_Meaning = tuple[str | None, str | None, str | None, ImportanceCategory]


_META = set("\\[](){}.?*+|^$")
_OPTIONAL_LEAD = re.compile(r"^\(\?:\(\?:[a-z|]+\)\\s\+\)\?")  # "(?:(?:me|se|nos)\s+)?"


def _literal_prefixes(regex: str) -> tuple[str, ...] | None:
    r"""The literal start of each alternative of a regex's leading group, or None when unsure.

    ``\b(?:moro|mora|(?:me|se)\s+mudei)...`` -> ("moro", "mora", ...). A pattern whose start
    cannot be read that way (an optional word group other than a leading clitic, a character
    class) gets None and is always run.
    """
    source = regex.removeprefix(r"\b")
    lead = _OPTIONAL_LEAD.match(source)
    optional: list[str] = []
    if lead is not None:
        optional = lead.group()[6 : lead.group().index(")")].split("|")
        source = source[lead.end() :]
    if not source.startswith("(?:"):
        return None
    depth, alternatives, current = 0, [], ""
    for char in source[3:]:
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                alternatives.append(current)
                break
            depth -= 1
        elif char == "|" and depth == 0:
            alternatives.append(current)
            current = ""
            continue
        current += char
    else:
        return None
    prefixes: list[str] = list(optional)
    for alternative in alternatives:
        literal = ""
        for char in alternative.removeprefix(r"\b"):
            if char in _META:
                break
            literal += char
        if not literal:
            return None
        prefixes.append(literal.lower())
    return tuple(dict.fromkeys(prefixes))


def _p(
    kind: str,
    language: Language,
    regex: str,
    meaning: _Meaning,
    *,
    target: TargetRule = "name",
    condition: TargetCondition = "any",
    milestone: bool = False,
) -> RelationPattern:
    attribute_key, relation, target_type, category = meaning
    prefixes = _literal_prefixes(regex)
    lowercase = regex.replace("(?P<", "") == regex.replace("(?P<", "").lower()
    fast = re.compile(regex[2:]) if regex.startswith(r"\b") and lowercase else None
    return RelationPattern(
        kind=kind,
        language=language,
        regex=re.compile(regex, re.IGNORECASE),
        fast=fast,
        prefixes=prefixes,
        attribute_key=attribute_key,
        relation=relation,
        target_type=target_type,
        category=category,
        target=target,
        condition=condition,
        milestone=milestone,
    )


_RESIDENCE: _Meaning = ("location.residence", "lives_in", "place", "relationship_change")
_EMPLOYER: _Meaning = ("work.employer", "works_at", "organization", "relationship_change")
_LEFT_EMPLOYER: _Meaning = ("work.employer", "former_employee_of", "organization", "relationship_change")
_PAST_EMPLOYER: _Meaning = (None, "former_employee_of", "organization", "biographical_milestone")
_OCCUPATION: _Meaning = ("work.occupation", None, None, "relationship_change")
_PARTNER: _Meaning = ("relationship.partner", "partner_of", "person", "relationship_change")
_EX_PARTNER: _Meaning = ("relationship.partner", "ex_partner_of", "person", "relationship_change")
_LIKE: _Meaning = ("preference.like", "likes", None, "stable_preference")
_DISLIKE: _Meaning = ("preference.dislike", "dislikes", None, "stable_preference")
_SCHOOL: _Meaning = ("education.school", "studies_at", "organization", "biographical_milestone")
_BORN: _Meaning = ("location.hometown", "born_in", "place", "biographical_milestone")
_GREW_UP: _Meaning = ("location.hometown", "grew_up_in", "place", "biographical_milestone")
_FROM: _Meaning = ("location.hometown", "comes_from", "place", "biographical_milestone")
_LIVED: _Meaning = (None, "lived_in", "place", "biographical_milestone")
_HIRED: _Meaning = (None, "hired", None, "specific_event")
_FRIEND: _Meaning = ("relationship.friend", "friend_of", "person", "relationship_change")

# Order matters only for the attribute key of a fact: the first single-valued match wins.
PATTERNS: tuple[RelationPattern, ...] = (
    # residence
    _p(
        "residence",
        "en",
        r"\b(?:live|lives|living|reside|resides|residing|based|settled)\s+"
        r"(?:now\s+|currently\s+|still\s+|also\s+)?in\s+" + _THE,
        _RESIDENCE,
    ),
    _p(
        "residence",
        "en",
        r"\b(?:moved|move|moves|moving|relocated|relocate|relocates|relocating)\s+"
        r"(?:back\s+|recently\s+|over\s+|here\s+|all\s+the\s+way\s+)?to\s+" + _THE,
        _RESIDENCE,
        condition="not_org",
    ),
    _p(
        "residence",
        "pt",
        r"\b(?:moro|mora|moram|moramos|morando|morar|resido|reside|residem|vivo|vive|vivem|vivemos)\s+"
        r"(?:agora\s+|hoje\s+|atualmente\s+|ainda\s+|também\s+|tambem\s+|sozinh[oa]\s+|mais\s+)?(?:em|no|na|nos|nas)\s+",
        _RESIDENCE,
    ),
    _p(
        "residence",
        "pt",
        r"\b(?:(?:me|se|nos)\s+)?(?:mudei|mudou|mudaram|mudamos|mudando|mudar|mudo|muda|mude|mudem|mudaria|mudarei|mudará)\s+"
        r"(?:de\s+volta\s+|agora\s+|recentemente\s+)?(?:para|pra|pro|pras|pros)\s+" + _O_A,
        _RESIDENCE,
        condition="not_org",
    ),
    _p("lived", "en", r"\b(?:lived|used\s+to\s+live)\s+in\s+" + _THE, _LIVED),
    _p(
        "lived",
        "pt",
        r"\b(?:morei|morou|moraram|morava|moravam|morávamos|vivi|viveu|vivia|viviam)\s+(?:em|no|na|nos|nas)\s+",
        _LIVED,
    ),
    # employment
    _p(
        "employer",
        "en",
        r"\b(?:work|works|working)\s+(?:now\s+|currently\s+|still\s+|also\s+|full[- ]time\s+|part[- ]time\s+|"
        r"remotely\s+)?(?:at|for)\s+" + _THE,
        _EMPLOYER,
        condition="not_place",
    ),
    _p("employer", "en", r"\b(?:joined|joining|join|joins)\s+" + _THE, _EMPLOYER, condition="not_place_person"),
    _p("employer", "en", r"\b(?:hired|employed)\s+(?:at|by)\s+" + _THE, _EMPLOYER),
    _p(
        "employer",
        "en",
        r"\b(?:new\s+job|job|position|internship|role)\s+(?:at|with)\s+" + _THE,
        _EMPLOYER,
        condition="not_place",
    ),
    _p(
        "employer",
        "en",
        r"\bstarted\s+(?:working\s+|a\s+new\s+job\s+)?(?:at|with)\s+" + _THE,
        _EMPLOYER,
        condition="not_place_person",
    ),
    _p(
        "employer",
        "en",
        r"\b(?:went|moved|go|goes|going|switched)\s+(?:over\s+)?to\s+" + _THE,
        _EMPLOYER,
        condition="org_or_role",
    ),
    _p(
        "employer",
        "pt",
        r"\b(?:trabalho|trabalha|trabalham|trabalhamos|trabalhando|trabalhar)\s+"
        r"(?:agora\s+|atualmente\s+|hoje\s+|ainda\s+|também\s+|tambem\s+|remoto\s+|remotamente\s+)?"
        r"(?:na|no|em|pela|pelo|para\s+a|para\s+o|pra|pro)\s+",
        _EMPLOYER,
        condition="not_place",
    ),
    _p(
        "employer",
        "pt",
        r"\b(?:entrei|entrou|entraram|entramos|entrar)\s+(?:na|no|para\s+a|para\s+o|pra|pro)\s+",
        _EMPLOYER,
        condition="not_place_person",
    ),
    _p("employer", "pt", r"\b(?:fui|foi|foram)\s+contratad[oa]s?\s+(?:pela|pelo|na|no)\s+", _EMPLOYER),
    _p(
        "employer",
        "pt",
        r"\b(?:comecei|começou|comecou|começamos|comecamos)\s+(?:a\s+trabalhar\s+)?(?:na|no|em)\s+",
        _EMPLOYER,
        condition="not_place_person",
    ),
    _p(
        "employer",
        "pt",
        r"\b(?:fui|foi|foram|vou|vai|vão)\s+(?:pra|para|pro)\s+" + _O_A,
        _EMPLOYER,
        condition="org_or_role",
    ),
    _p("employer", "pt", r"\b(?:novo\s+)?emprego\s+(?:na|no|em)\s+", _EMPLOYER, condition="not_place"),
    # leaving an employer: the employer slot changes
    _p(
        "left_employer",
        "en",
        r"\bno\s+longer\s+(?:works?|working|employed)\s+(?:at|for|by)\s+" + _THE,
        _LEFT_EMPLOYER,
    ),
    _p(
        "left_employer",
        "en",
        r"\b(?:don't|doesn't|don’t|doesn’t|do\s+not|does\s+not)\s+work\s+(?:at|for)\s+" + _THE,
        _LEFT_EMPLOYER,
    ),
    _p(
        "left_employer",
        "en",
        r"\b(?:left|quit|quits|leaving|leaves|resigned\s+from|fired\s+from|laid\s+off\s+(?:from|by))\s+" + _THE,
        _LEFT_EMPLOYER,
        condition="not_place_person",
    ),
    _p(
        "left_employer",
        "pt",
        r"\b(?:não|nao)\s+(?:trabalho|trabalha|trabalham|trabalhamos)\s+mais\s+"
        r"(?:na|no|em|pela|pelo|para\s+a|para\s+o|pra|pro)\s+",
        _LEFT_EMPLOYER,
    ),
    _p(
        "left_employer",
        "pt",
        r"\b(?:saí|sai|saiu|saíram|sairam|sair|saindo)\s+(?:da|do|de)\s+",
        _LEFT_EMPLOYER,
        condition="not_place_person",
    ),
    _p(
        "left_employer",
        "pt",
        r"\b(?:pedi|pediu|pediram)\s+(?:as\s+contas|demissão|demissao)\s+(?:da|do|na|no)\s+",
        _LEFT_EMPLOYER,
    ),
    _p("left_employer", "pt", r"\b(?:fui|foi|foram)\s+demitid[oa]s?\s+(?:da|do|pela|pelo)\s+", _LEFT_EMPLOYER),
    _p("left_employer", "pt", r"\b(?:deixei|deixou)\s+(?:a|o)\s+", _LEFT_EMPLOYER, condition="org"),
    _p(
        "past_employer",
        "en",
        r"\b(?:used\s+to\s+work|worked|previously\s+worked)\s+(?:at|for)\s+" + _THE,
        _PAST_EMPLOYER,
        condition="not_place",
    ),
    _p(
        "past_employer",
        "pt",
        r"\b(?:trabalhava|trabalhei|trabalhou|trabalhavam|trabalharam)\s+"
        r"(?:na|no|em|pela|pelo|para\s+a|para\s+o|pra|pro)\s+",
        _PAST_EMPLOYER,
        condition="not_place",
    ),
    # occupation (no relation: the value is a profession, not an entity)
    _p(
        "occupation",
        "en",
        r"(?:\bam|'m|’m|\bis|'s|’s|\bwas|\bbecame|\bbecome|\bbecomes)\s+"
        r"(?:now\s+|currently\s+|also\s+|still\s+|already\s+|finally\s+)?(?:a|an)\s+" + _ROLE,
        _OCCUPATION,
        target="profession",
    ),
    _p(
        "occupation",
        "en",
        r"\b(?:work|works|working|worked)\s+as\s+(?:a\s+|an\s+|the\s+)?" + _ROLE,
        _OCCUPATION,
        target="role",
    ),
    _p(
        "occupation",
        "pt",
        r"\b(?:sou|é|era|virou|virei|tornou-se|tornei-me|me\s+tornei|se\s+tornou)\s+"
        r"(?:agora\s+|também\s+|tambem\s+|hoje\s+)?(?:um\s+|uma\s+)?" + _ROLE,
        _OCCUPATION,
        target="profession",
    ),
    _p(
        "occupation",
        "pt",
        r"\b(?:trabalho|trabalha|trabalhava|trabalhei|trabalhou|atuo|atua)\s+como\s+(?:um\s+|uma\s+)?" + _ROLE,
        _OCCUPATION,
        target="role",
    ),
    # partners
    _p("partner", "en", r"\b(?:married|engaged)\s+to\s+", _PARTNER),
    _p("partner", "en", r"\b(?:marry|marries|married)\s+", _PARTNER, milestone=True),
    _p("partner", "en", r"\b(?:dating|dates)\s+", _PARTNER),
    _p("partner", "pt", r"\bcasad[oa]s?\s+com\s+" + _O_A, _PARTNER),
    _p(
        "partner",
        "pt",
        r"\b(?:casei|casou|casaram|casamos|casar|casando|noivei|noivou|noivamos)\s+com\s+" + _O_A,
        _PARTNER,
        milestone=True,
    ),
    _p("partner", "pt", r"\b(?:namoro|namora|namoram|namoramos|namorando|namorar)\s+(?:com\s+)?" + _O_A, _PARTNER),
    _p(
        "ex_partner",
        "en",
        r"\b(?:divorced|divorcing|separated|split\s+up|broke\s+up)\s+(?:from|with)\s+",
        _EX_PARTNER,
    ),
    _p(
        "ex_partner",
        "pt",
        r"\b(?:(?:me|se)\s+)?(?:separei|separou|divorciei|divorciou|terminei|terminou|terminamos)\s+"
        r"(?:com|d[oa]|de)\s+" + _O_A,
        _EX_PARTNER,
    ),
    _p("friend", "en", r"\b(?:friends|friend)\s+with\s+", _FRIEND),
    # hiring someone
    _p("hired", "en", r"\b(?:hired|recruited|employs)\s+" + _THE, _HIRED),
    _p("hired", "pt", r"\b(?:contratou|contratei|contrataram)\s+" + _O_A, _HIRED),
    # likes and dislikes (a relation only when the object is a name)
    _p(
        "likes",
        "en",
        r"\b(?:like|likes|love|loves|enjoy|enjoys|adore|adores|prefer|prefers)\s+" + _OBJ,
        _LIKE,
        target="object",
    ),
    _p(
        "likes",
        "en",
        r"(?:\b(?:am|is|are)|'m|’m|'s|’s)\s+(?:(?:a\s+)?(?:big\s+|huge\s+)?fan\s+of|into|passionate\s+about|"
        r"crazy\s+about|obsessed\s+with)\s+" + _OBJ,
        _LIKE,
        target="object",
    ),
    _p(
        "likes",
        "pt",
        # "mais" only as in "não gosto mais de" (a retraction), never "gosto mais de" (a comparison).
        r"\b(?:gosto|gosta|gostam|gostamos|gostava|gostei|gostou)\s+(?:muito\s+|bastante\s+|demais\s+|mesmo\s+|"
        r"tanto\s+|(?<=\bn[ãa]o\s(?:gosto|gosta)\s)mais\s+)?(?:de|do|da|dos|das)\s+" + _OBJ,
        _LIKE,
        target="object",
    ),
    _p(
        "likes",
        "pt",
        r"\b(?:adoro|adora|adoram|adoramos|amo|ama|amam|amamos|curto|curte|curtimos|prefiro|prefere|preferimos)\s+"
        + _OBJ,
        _LIKE,
        target="object",
    ),
    _p(
        "likes",
        "pt",
        r"\b(?:sou|é|somos|são)\s+(?:muito\s+)?(?:fã|fa)\s+d(?:e|o|a|os|as)\s+" + _OBJ,
        _LIKE,
        target="object",
    ),
    _p(
        "dislikes",
        "en",
        r"\b(?:hate|hates|dislike|dislikes|detest|detests|can't\s+stand|can’t\s+stand|cannot\s+stand)\s+" + _OBJ,
        _DISLIKE,
        target="object",
    ),
    _p("dislikes", "pt", r"\b(?:odeio|odeia|odeiam|detesto|detesta|detestam)\s+" + _OBJ, _DISLIKE, target="object"),
    # education
    _p(
        "school",
        "en",
        r"\b(?:study|studies|studying|studied)\s+(?:[\w-]+\s+){0,3}?at\s+" + _THE,
        _SCHOOL,
        condition="not_place_person",
    ),
    _p(
        "school",
        "en",
        r"\b(?:graduated|graduate|graduating)\s+from\s+" + _THE,
        _SCHOOL,
        condition="not_place_person",
        milestone=True,
    ),
    _p(
        "school",
        "en",
        r"\b(?:attend|attends|attending|attended|enrolled\s+(?:at|in))\s+" + _THE,
        _SCHOOL,
        condition="not_place_person",
    ),
    _p(
        "school",
        "pt",
        r"\b(?:estudo|estuda|estudam|estudamos|estudando|estudei|estudou|estudava|estudar)\s+"
        r"(?:[\w-]+\s+){0,3}?(?:na|no|em|pela|pelo)\s+",
        _SCHOOL,
        condition="not_place_person",
    ),
    _p(
        "school",
        "pt",
        r"\b(?:me\s+formei|se\s+formou|formei|formou|formad[oa]|formaram)\s+(?:em\s+[\w-]+(?:\s+[\w-]+)?\s+)?"
        r"(?:na|no|pela|pelo)\s+",
        _SCHOOL,
        condition="not_place_person",
        milestone=True,
    ),
    # where someone is from
    _p("hometown", "en", r"\bborn\s+in\s+" + _THE, _BORN, milestone=True),
    _p("hometown", "en", r"\b(?:raised|grew\s+up)\s+in\s+" + _THE, _GREW_UP),
    _p(
        "hometown",
        "en",
        r"(?:\b(?:am|is|are|come|comes|came)|'m|’m|'s|’s)\s+(?:originally\s+)?from\s+" + _THE,
        _FROM,
        condition="not_org",
    ),
    _p(
        "hometown",
        "pt",
        r"\b(?:nasci|nasceu|nasceram|nascid[oa])\s+(?:em|no|na|nos|nas)\s+",
        _BORN,
        milestone=True,
    ),
    _p("hometown", "pt", r"\b(?:cresci|cresceu|crescemos|criad[oa])\s+(?:em|no|na|nos|nas)\s+", _GREW_UP),
    _p(
        "hometown",
        "pt",
        r"\b(?:sou|é|somos|são|vim|veio|viemos)\s+(?:natural\s+|originalmente\s+)?(?:de|do|da|dos|das)\s+",
        _FROM,
        condition="not_org_person",
    ),
)


class PatternIndex:
    """The patterns of one language, found by the words of a sentence instead of trying each regex.

    Every pattern whose trigger alternatives have literal beginnings (``"moro"``, ``"mudei"``,
    ``"'m"``) is filed under them; a sentence's candidates are the patterns filed under a prefix
    of one of its words (or of the part of a word after an apostrophe), plus the few patterns
    without a usable prefix. A few dictionary look-ups replace some thirty regex scans.
    """

    def __init__(self, patterns: tuple[RelationPattern, ...]) -> None:
        self.patterns = patterns
        self._always: set[int] = set()
        self._by_prefix: dict[str, set[int]] = {}
        for position, pattern in enumerate(patterns):
            if pattern.prefixes is None:
                self._always.add(position)
                continue
            for prefix in pattern.prefixes:
                self._by_prefix.setdefault(prefix, set()).add(position)
        self._lengths = sorted({len(prefix) for prefix in self._by_prefix})

    def candidates(self, words: Iterable[str]) -> list[RelationPattern]:
        """Patterns that may match a sentence made of ``words`` (lower-cased), in table order."""
        chosen = set(self._always)
        for word in words:
            pieces = [word]
            for apostrophe in ("'", "’"):
                cut = word.find(apostrophe)
                if cut > 0:
                    pieces.append(word[cut:])
            for piece in pieces:
                for length in self._lengths:
                    if length > len(piece):
                        break
                    found = self._by_prefix.get(piece[:length])
                    if found:
                        chosen |= found
        return [self.patterns[position] for position in sorted(chosen)]


# --- kinship and pets ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KinSpec:
    """A relationship noun: ``my sister Ana`` -> speaker ``sibling_of`` Ana, key family.sibling.

    ``named_is_source`` flips the relation (a parent is the source of ``parent_of``).
    ``inverse_key`` is the attribute key from the named person's side (a mother's child).
    """

    kind: str
    attribute_key: str | None
    relation: str
    named_type: str = "person"
    named_is_source: bool = False
    inverse_key: str | None = None


_PARTNER_KIN = KinSpec("partner", "relationship.partner", "partner_of", inverse_key="relationship.partner")
_SIBLING_KIN = KinSpec("sibling", "family.sibling", "sibling_of", inverse_key="family.sibling")
_PARENT_KIN = KinSpec("parent", "family.parent", "parent_of", named_is_source=True, inverse_key="family.child")
_CHILD_KIN = KinSpec("child", "family.child", "parent_of", inverse_key="family.parent")
_FRIEND_KIN = KinSpec("friend", "relationship.friend", "friend_of", inverse_key="relationship.friend")
_RELATIVE_KIN = KinSpec("relative", "family.relative", "relative_of", inverse_key="family.relative")
_BOSS_KIN = KinSpec("boss", None, "reports_to")
_COLLEAGUE_KIN = KinSpec("colleague", None, "colleague_of")
_PET_KIN = KinSpec("pet", "pet", "owns", named_type="pet")


def _kin(blob: str, spec: KinSpec) -> dict[str, KinSpec]:
    return dict.fromkeys(_words(blob), spec)


KIN: dict[str, KinSpec] = {
    **_kin(
        "wife husband girlfriend boyfriend partner fiance fiancé fiancee fiancée spouse "
        "esposa marido namorada namorado noiva noivo companheira companheiro mulher cônjuge conjuge",
        _PARTNER_KIN,
    ),
    **_kin("brother sister sibling twin irmão irmao irmã irma gêmeo gemeo gêmea gemea", _SIBLING_KIN),
    **_kin(
        "mother father mom mum dad mommy daddy mama papa stepmother stepfather "
        "mãe mae pai mamãe mamae papai madrasta padrasto",
        _PARENT_KIN,
    ),
    **_kin("son daughter kid child baby stepson stepdaughter filho filha bebê bebe enteado enteada", _CHILD_KIN),
    **_kin("friend bestie buddy pal amigo amiga parceiro parceira", _FRIEND_KIN),
    **_kin(
        "grandmother grandfather grandma grandpa granny uncle aunt cousin nephew niece grandson granddaughter "
        "mother-in-law father-in-law brother-in-law sister-in-law avó avô avo tio tia primo prima sobrinho "
        "sobrinha neto neta sogra sogro cunhado cunhada",
        _RELATIVE_KIN,
    ),
    **_kin("boss manager supervisor chefe gerente gestor gestora", _BOSS_KIN),
    **_kin("colleague coworker co-worker teammate colega", _COLLEAGUE_KIN),
    **_kin(
        "dog puppy cat kitten kitty parrot bird hamster rabbit bunny turtle tortoise horse fish pony "
        "cachorro cachorra cão cao cadela cachorrinho cachorrinha gato gata gatinho gatinha papagaio calopsita "
        "periquito coelho coelha tartaruga cavalo égua egua peixe passarinho",
        _PET_KIN,
    ),
}

# Adjectives that sit between a possessive and its noun: "my best friend", "minha nova chefe".
PRE_NOMINAL = _words(
    "best old older oldest young younger youngest little big new former late dear baby twin "
    "melhor novo nova antigo antiga querido querida grande velho velha único única unico unica "
    "primeiro primeira segundo segunda último última ultimo ultima eterno eterna amado amada ex"
)
ARTICLES = _words("o a os as the um uma an")
HAVE_VERBS = _words("have has had got get gets tenho tem tinha tive teve temos ganhei ganhou adotei adotou adopted")

# --- lexicons that type names ----------------------------------------------------------

PLACE_NAMES = frozenset(
    " ".join(fold(name).split())
    for name in (
        "São Paulo",
        "Rio de Janeiro",
        "Rio",
        "Belo Horizonte",
        "BH",
        "Brasília",
        "Curitiba",
        "Porto Alegre",
        "Recife",
        "Fortaleza",
        "Manaus",
        "Belém",
        "Florianópolis",
        "Floripa",
        "Goiânia",
        "Campinas",
        "Santos",
        "Niterói",
        "Sampa",
        "SP",
        "RJ",
        "MG",
        "RS",
        "SC",
        "PR",
        "BA",
        "Bahia",
        "Minas Gerais",
        "Santa Catarina",
        "Paraná",
        "Pernambuco",
        "Ceará",
        "Brasil",
        "Brazil",
        "Portugal",
        "Lisboa",
        "Lisbon",
        "Porto",
        "Coimbra",
        "Argentina",
        "Buenos Aires",
        "Chile",
        "Uruguai",
        "Uruguay",
        "Montevideo",
        "Montevidéu",
        "Colômbia",
        "Colombia",
        "Bogotá",
        "Peru",
        "Lima",
        "México",
        "Mexico",
        "Canada",
        "Canadá",
        "Toronto",
        "Vancouver",
        "Montreal",
        "Estados Unidos",
        "United States",
        "USA",
        "US",
        "EUA",
        "UK",
        "New York",
        "Nova York",
        "Nova Iorque",
        "NYC",
        "Brooklyn",
        "Manhattan",
        "San Francisco",
        "Los Angeles",
        "LA",
        "Boston",
        "Chicago",
        "Seattle",
        "Austin",
        "Miami",
        "Texas",
        "California",
        "Califórnia",
        "Florida",
        "Flórida",
        "London",
        "Londres",
        "England",
        "Inglaterra",
        "Ireland",
        "Irlanda",
        "Dublin",
        "Scotland",
        "Escócia",
        "Paris",
        "France",
        "França",
        "Berlin",
        "Berlim",
        "Munich",
        "Munique",
        "Germany",
        "Alemanha",
        "Spain",
        "Espanha",
        "Madrid",
        "Barcelona",
        "Italy",
        "Itália",
        "Rome",
        "Roma",
        "Milan",
        "Milão",
        "Amsterdam",
        "Amsterdã",
        "Netherlands",
        "Holanda",
        "Switzerland",
        "Suíça",
        "Zurich",
        "Zurique",
        "Europe",
        "Europa",
        "Japan",
        "Japão",
        "Tokyo",
        "Tóquio",
        "China",
        "India",
        "Índia",
        "Australia",
        "Austrália",
        "Sydney",
        "Melbourne",
        "Africa",
        "África",
        "Asia",
        "Ásia",
    )
)
PLACE_PREFIXES = _words(
    "são sao santa santo porto rio belo nova new san santiago los las fort mount lake vila vale cidade serra "
    "praia ilha lago monte baía baia cabo campos foz saint"
)
ORG_SUFFIXES = _words(
    "tech technologies technology inc corp corporation ltd ltda sa s.a s.a. s/a labs lab bank group company "
    "co llc gmbh plc systems software solutions soluções solucoes consulting consultoria studios studio media "
    "capital ventures partners holdings industries foods motors airlines university college institute "
    "academy agency digital ai analytics games energy pharma health network networks cloud data bio "
    "foundation associates services serviços servicos engenharia tecnologia sistemas seguros investimentos "
    "telecom store shop club fc"
)
ORG_PREFIXES = _words(
    "banco grupo universidade faculdade escola instituto hospital clínica clinica colégio colegio agência "
    "agencia editora fundação fundacao museu museum university bank college institute company companhia "
    "clube club associação associacao ministério ministerio prefeitura supermercado"
)

PROFESSIONS = _words(
    # English
    "doctor physician surgeon nurse dentist pharmacist therapist psychologist psychiatrist vet veterinarian "
    "engineer developer programmer coder designer architect teacher professor lecturer tutor student "
    "researcher scientist lawyer attorney judge accountant economist analyst consultant manager director "
    "ceo cto cfo coo founder cofounder co-founder entrepreneur freelancer writer author journalist editor "
    "photographer artist painter musician singer actor actress dancer chef cook baker waiter waitress "
    "bartender barista driver pilot mechanic electrician plumber carpenter farmer officer cop policeman "
    "policewoman firefighter soldier salesman saleswoman salesperson cashier clerk secretary assistant "
    "intern trainee recruiter marketer biologist chemist physicist mathematician statistician translator "
    "interpreter librarian paramedic midwife caregiver nanny housekeeper gardener tailor hairdresser barber "
    "stylist model athlete coach trainer youtuber streamer influencer investor banker broker realtor "
    "nutritionist physiotherapist optometrist radiologist sociologist historian philosopher principal "
    "administrator sysadmin devops lead head vp president executive producer illustrator animator "
    "copywriter planner pediatrician cardiologist dermatologist surgeon professor "
    # Portuguese
    "médico médica enfermeiro enfermeira dentista farmacêutico farmacêutica terapeuta psicólogo psicóloga "
    "psiquiatra veterinário veterinária engenheiro engenheira desenvolvedor desenvolvedora programador "
    "programadora arquiteto arquiteta professora estudante aluno aluna pesquisador pesquisadora "
    "cientista advogado advogada juiz juíza contador contadora economista analista consultor consultora "
    "gerente diretor diretora fundador fundadora empresário empresária empreendedor empreendedora "
    "autônomo autônoma escritor escritora jornalista fotógrafo fotógrafa artista pintor pintora músico "
    "cantor cantora ator atriz dançarino dançarina bailarino bailarina cozinheiro cozinheira padeiro "
    "padeira garçom garçonete motorista piloto mecânico mecânica eletricista encanador carpinteiro "
    "marceneiro agricultor fazendeiro policial bombeiro bombeira soldado militar vendedor vendedora "
    "secretário secretária assistente estagiário estagiária recrutador recrutadora biólogo bióloga "
    "químico química físico matemático matemática estatístico estatística tradutor tradutora intérprete "
    "bibliotecário bibliotecária nutricionista fisioterapeuta fonoaudiólogo fonoaudióloga cabeleireiro "
    "cabeleireira barbeiro atleta treinador treinadora técnico técnica investidor investidora bancário "
    "bancária corretor corretora servidor servidora funcionário funcionária coordenador coordenadora "
    "supervisor supervisora administrador administradora publicitário publicitária gestor gestora "
    "diarista faxineira babá cuidador cuidadora pedreiro costureira líder lider pediatra cardiologista "
    "dermatologista cirurgião cirurgiã ilustrador ilustradora produtor produtora redator redatora"
)
_PROFESSION_SUFFIXES = ("ologist", "ologo", "ologa", "ista", "ist")
_NOT_PROFESSIONS = _words(
    "optimist pessimist perfectionist realist idealist minimalist otimista pessimista perfeccionista realista "
    "idealista minimalista egoísta altruísta egoista altruista turista tourist racist racista machista "
    "feminista feminist list lista vista pista revista exist"
)


def is_profession(word: str) -> bool:
    """Whether a (single) word names a profession: the lexicon, or a -ologist/-ista/-ist ending."""
    folded = fold_word(word)
    if folded in PROFESSIONS:
        return True
    return folded.endswith(_PROFESSION_SUFFIXES) and len(folded) > 5 and folded not in _NOT_PROFESSIONS


# --- verbs: first person -> third person -----------------------------------------------

EN_FIRST_TO_THIRD: dict[str, str] = {
    "am": "is",
    "are": "is",
    "were": "was",
    "have": "has",
    "do": "does",
    "go": "goes",
    "don't": "doesn't",
    "don’t": "doesn’t",
    "haven't": "hasn't",
    "haven’t": "hasn’t",
    "aren't": "isn't",
    "aren’t": "isn’t",
    "weren't": "wasn't",
    "weren’t": "wasn’t",
}
# Words after "I" that are not present-tense verbs of the speaker: past forms, modals, and
# function words (a past form stays as it is: "I moved" -> "Rafael moved").
EN_KEEP_AFTER_I = _words(
    "was did had can could will would shall should may might must can't couldn't won't wouldn't shouldn't "
    "didn't wasn't hadn't mustn't ain't can’t couldn’t won’t wouldn’t shouldn’t didn’t wasn’t hadn’t "
    "went met got saw bought took made came left found thought told said began became ate drank ran wrote "
    "felt knew lost paid sent spent built brought taught caught fell gave heard kept led meant put quit rode "
    "sang sat slept sold stood swam won wore understood broke chose drove flew forgot grew hid hit hurt let "
    "set shut spoke stole threw woke read cut beat bet lay lit struck swung dug fed fought forgave froze "
    "held hung lent sought shook shot sank spun stuck stung sprang strove swore tore wept wound "
    "and or but to too a an the in on at of for with as than that who which myself also not "
    "just only still even ever never always really often usually"
)
ADVERBS_EN = _words(
    "also really just still never always usually often sometimes now currently actually even only already "
    "rarely seldom totally absolutely definitely certainly truly kinda sorta basically mostly generally "
    "recently finally probably honestly literally seriously personally normally typically occasionally "
    "hardly barely simply mainly frequently constantly secretly daily again ever not"
)
NEGATIONS = _words("not never don't doesn't didn't don’t doesn’t didn’t no não nao nunca jamais")

_PT_TABLE_BLOB = """
sou:é estou:está tô:tá to:ta tenho:tem moro:mora trabalho:trabalha gosto:gosta adoro:adora amo:ama
estudo:estuda vou:vai faço:faz quero:quer posso:pode sei:sabe acho:acha preciso:precisa conheço:conhece
vivo:vive falo:fala uso:usa como:come bebo:bebe corro:corre leio:lê escrevo:escreve jogo:joga toco:toca
sinto:sente durmo:dorme chamo:chama prefiro:prefere odeio:odeia detesto:detesta curto:curte namoro:namora
pretendo:pretende planejo:planeja penso:pensa acredito:acredita costumo:costuma fico:fica saio:sai
volto:volta chego:chega começo:começa termino:termina ajudo:ajuda cuido:cuida tento:tenta consigo:consegue
assisto:assiste ouço:ouve vejo:vê digo:diz dou:dá venho:vem ponho:põe trago:traz sigo:segue visito:visita
viajo:viaja cozinho:cozinha pratico:pratica treino:treina nado:nada danço:dança canto:canta pinto:pinta
desenho:desenha dirijo:dirige compro:compra pago:paga ganho:ganha gasto:gasta ensino:ensina aprendo:aprende
escuto:escuta lembro:lembra esqueço:esquece mudo:muda resido:reside atuo:atua leciono:leciona
fui:foi fiz:fez tive:teve estive:esteve pude:pôde quis:quis disse:disse trouxe:trouxe soube:soube vim:veio
vi:viu li:leu dei:deu pus:pôs comi:comeu bebi:bebeu saí:saiu caí:caiu perdi:perdeu vendi:vendeu
conheci:conheceu nasci:nasceu cresci:cresceu escolhi:escolheu parti:partiu decidi:decidiu consegui:conseguiu
senti:sentiu dormi:dormiu abri:abriu descobri:descobriu assisti:assistiu aprendi:aprendeu entendi:entendeu
escrevi:escreveu recebi:recebeu corri:correu vivi:viveu esqueci:esqueceu ofereci:ofereceu ouvi:ouviu
pedi:pediu segui:seguiu subi:subiu sofri:sofreu resolvi:resolveu respondi:respondeu bati:bateu mexi:mexeu
agradeci:agradeceu percebi:percebeu morri:morreu convenci:convenceu venci:venceu torci:torceu
irei:irá farei:fará direi:dirá trarei:trará terei:terá serei:será estarei:estará poderei:poderá
"""
PT_FIRST_TO_THIRD: dict[str, str] = {
    first: third for first, _, third in (pair.partition(":") for pair in _PT_TABLE_BLOB.split())
}
# Accent-less spellings people type ("faco", "conheco"), except where dropping the accent gives a
# third-person form ("sai" is "he leaves", not "saí").
_PT_FOLDED_TABLE: dict[str, str] = {
    fold(first): third for first, third in PT_FIRST_TO_THIRD.items() if fold(first) not in {"sai", "cai"}
}
# First-person forms that are also common nouns or adjectives ("o trabalho", "o gosto", "vivo"):
# they count as verbs at the start of a sentence only before a word that may follow a verb.
AMBIGUOUS_PT_FIRST_PERSON = _raw_words(
    "trabalho gosto estudo jogo como uso amo toco canto desenho pinto treino começo comeco ensino gasto pago "
    "ganho vivo preciso namoro curto nado falo termino mudo sinto to"
)
PT_AFTER_AMBIGUOUS_VERB = _words(
    "na no nas nos em de do da dos das com para pra pro como desde há ha muito bastante demais todo todos "
    "toda todas aqui lá la sempre remoto remotamente bem mal num numa a o as os um uma pelo pela porque "
    "até ate sozinho sozinha também tambem mais menos ainda hoje amanhã ontem agora meu minha meus minhas "
    "você voce vocês ele ela isso isto muita muitos muitas pouco tanto "
    # A clitic right after it: "Preciso me organizar", "Preciso te contar" (an adjective takes none).
    "me te"
)
# -ei words that are not first-person preterites.
_NOT_PRETERITE = _words("hóquei hoquei jóquei joquei pônei ponei vôlei volei")
ADVERBS_PT = _words(
    "não nao também tambem já ja ainda sempre nunca só so quase realmente agora hoje ontem atualmente "
    "recentemente finalmente jamais mesmo inclusive apenas logo provavelmente talvez geralmente "
    "normalmente"
)
# Verbs whose "me" object is indirect: "me ligou" -> "ligou para Rafael".
INDIRECT_PT_VERBS = _words(
    "ligou ligaram disse disseram contou contaram deu deram mandou mandaram pediu pediram perguntou "
    "perguntaram emprestou ensinou mostrou ofereceu respondeu escreveu falou falaram explicou avisou "
    "sugeriu prometeu enviou telefonou agradeceu devolveu trouxe liga diz conta dá manda pede pergunta "
    "mostra explica avisa escreve fala"
)


def pt_first_to_third(word: str) -> str | None:
    """Third-person form of a Portuguese first-person verb, or None when ``word`` is not one.

    A table of common verbs, plus the regular -ar preterite ("comprei" -> "comprou",
    "fiquei" -> "ficou", "comecei" -> "começou"). Case of the first letter is kept.
    """
    folded = fold_word(word)
    third = PT_FIRST_TO_THIRD.get(word.lower()) or _PT_FOLDED_TABLE.get(folded)
    if third is None:
        lower = word.lower()
        if len(lower) < 5 or not lower.endswith("ei") or folded in _NOT_PRETERITE or not lower.isalpha():
            return None
        stem = lower[:-2]
        if stem.endswith("gu"):
            third = stem[:-1] + "ou"
        elif stem.endswith("qu"):
            third = stem[:-2] + "cou"
        elif stem.endswith("c"):
            third = stem[:-1] + "çou"
        else:
            third = stem + "ou"
    if word[:1].isupper():
        return third[:1].upper() + third[1:]
    return third


# --- sentence-level cues ---------------------------------------------------------------

_WEEKDAYS = (
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|segunda|terça|terca|quarta|quinta|sexta|"
    r"sábado|sabado|domingo"
)
_MONTHS = (
    r"january|february|march|april|may|june|july|august|september|october|november|december|janeiro|"
    r"fevereiro|março|marco|abril|maio|junho|julho|agosto|setembro|outubro|novembro|dezembro"
)
HEDGE = re.compile(
    r"\b(?:i\s+think|i\s+believe|i\s+guess|i\s+suppose|i\s+assume|probably|apparently|seems?\s+(?:like|that|to)|"
    r"i'?m\s+pretty\s+sure|acho\s+que|eu\s+acho|acredito\s+que|parece\s+que|provavelmente|pelo\s+jeito|"
    r"aparentemente|imagino\s+que|suponho\s+que)\b",
    re.IGNORECASE,
)
SPECULATION = re.compile(
    r"\b(?:maybe|perhaps|might|possibly|not\s+sure|i\s+wonder|talvez|quem\s+sabe|possivelmente|"
    r"n(?:ã|a)o\s+tenho\s+certeza|n(?:ã|a)o\s+sei\s+se|pode\s+ser\s+que|será\s+que|sera\s+que)\b",
    re.IGNORECASE,
)
TEMPORAL = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|this\s+(?:morning|afternoon|evening|week|weekend|month|year)|"
    rf"(?:last|next|this)\s+(?:night|week|weekend|month|year|{_WEEKDAYS})|on\s+(?:{_WEEKDAYS})|ago|"
    r"ontem|hoje|amanhã|amanha|anteontem|semana\s+passada|m[eê]s\s+passado|ano\s+passado|"
    r"semana\s+que\s+vem|pr[oó]xim[oa]\s+(?:semana|m[eê]s|ano)|n[oa]\s+(?:" + _WEEKDAYS + r")|atrás|atras|"
    rf"(?:in|em|de|on)\s+(?:{_MONTHS})|(?:19|20)\d{{2}}|\d{{1,2}}/\d{{1,2}}(?:/\d{{2,4}})?)\b",
    re.IGNORECASE,
)
HABITUAL = re.compile(
    r"\b(?:usually|always|every\s+(?:day|week|morning|night|weekend|month|year|" + _WEEKDAYS + r")|often|"
    r"sometimes|normally|generally|typically|daily|weekly|geralmente|sempre|todo\s+(?:dia|m[eê]s|ano|"
    r"fim\s+de\s+semana|s[aá]bado|domingo)|todos\s+os\s+dias|toda\s+(?:semana|manh[aã]|noite|" + _WEEKDAYS + r")|"
    r"costumo|costuma|normalmente|[àa]s\s+vezes|diariamente|semanalmente)\b",
    re.IGNORECASE,
)
MILESTONE = re.compile(
    r"\b(?:born|got\s+married|married|engaged|graduated|graduation|retired|divorced|passed\s+away|died|"
    r"gave\s+birth|had\s+a\s+baby|pregnant|nasci|nasceu|casei|casou|casamos|casaram|noivei|noivou|noivamos|"
    r"me\s+formei|se\s+formou|formatura|aposentei|aposentou|me\s+divorciei|se\s+divorciou|faleceu|morreu|"
    r"gr[aá]vida|deu\s+[àa]\s+luz)\b",
    re.IGNORECASE,
)
# Intentions and plans: "going to move to", "vou me mudar para". Checked in the clause up to the end
# of the trigger, so a planned move fills goal.plan instead of the residence slot.
FUTURE = re.compile(
    r"(?:\b(?:going\s+to|gonna|will|plan(?:s|ning)?\s+to|want(?:s)?\s+to|hope\s+to|thinking\s+(?:about|of)|"
    r"intend(?:s)?\s+to|would\s+like\s+to|vou|vai|vamos|vão|pretendo|pretende|quero|quer|planejo|planeja|"
    r"penso\s+em|pensando\s+em|gostaria\s+de|irei|irá)\b|'ll\b|’ll\b)",
    re.IGNORECASE,
)
FUTURE_TIME = re.compile(
    r"\b(?:next\s+(?:week|month|year|summer|winter|spring|fall)|soon|ano\s+que\s+vem|m[eê]s\s+que\s+vem|"
    r"pr[oó]ximo\s+(?:ano|m[eê]s)|pr[oó]xima\s+semana|em\s+breve)\b",
    re.IGNORECASE,
)
# Retractions, on folded text (accents removed): "não mora mais", "no longer", "já não".
RETRACTION = re.compile(
    r"\b(?:no\s+longer|not\s+\w+(?:\s+\w+)?\s+anymore|n't\s+\w+(?:\s+\w+){0,3}\s+anymore|not\s+anymore|"
    r"nao\s+\w+(?:\s+\w+)?\s+mais|ja\s+nao|deixou\s+de|deixei\s+de|stopped|quit|anymore)\b"
)
# Words before a like-verb that make it something else: "would like", "looks like", "feel like".
LIKE_BLOCKERS = _words(
    "would 'd ’d i'd i’d we'd you'd look looks looked looking sound sounds sounded seem seems seemed "
    "feel feels felt just something things stuff nothing anything everything more much people someone "
    "somebody anyone exactly kinda sorta"
)
EXCLUDED_OBJECTS = _words("you him her them it this that me us ya")
