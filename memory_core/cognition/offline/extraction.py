"""Offline extraction: one fact per informative sentence, plus the entities and relations patterns find.

This is a rule engine, not a language model. For every sentence that is not small talk, not
a question and has at least three words, it:

1. finds capitalised names (:func:`.text.find_names`) and the known entities the message
   names (informed mode), groups parenthetical aliases ("Guili (Guilherme Maturana)") and
   relational hints ("Carol (namorada do Rafael)");
2. picks the sentence's subject: the speaker for first-person sentences ("I ...", "Eu ...",
   Portuguese sentences that open with a first-person verb: "Moro em ..."), else the name
   that opens it ("O Thiago Nogueira ..."), the name after "my sister" ("My sister Ana ..."),
   else the speaker;
3. runs the trigger patterns of :mod:`.patterns` (lives in / mora em / works at / saiu da /
   é designer / married to / gosta de ...) and the kinship and pet nouns ("my dog Rex",
   "minha esposa Ana") to get relations, entity types and the fact's attribute key;
4. keeps the sentence's own wording as the fact text, resolving first-person words to the
   speaker's name and conjugating the verb ("Eu moro em São Paulo." -> "Rafael mora em São
   Paulo."; "My sister Ana is a doctor." -> "Rafael's sister Ana is a doctor."), and adding
   the date each relative date means, from the message's ``occurred_at`` in the configured
   ``timezone`` ("yesterday" -> "yesterday (7 May 2023)"; :mod:`.relative_dates`).

A sentence whose coordinated clauses fill two different single-valued slots ("I moved to
Berlin and I work at Acme") becomes one fact per clause, so each slot can be updated alone.
Profiles are never written here (``updated_profiles`` stays empty).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from memory_core.cognition.models import (
    ConfidenceLevel,
    ExtractedEntity,
    ExtractedFact,
    ExtractedRelation,
    ExtractionInput,
    ExtractionOutput,
    ImportanceCategory,
    KnownEntity,
)
from memory_core.cognition.offline.patterns import (
    ADVERBS_EN,
    ADVERBS_PT,
    AMBIGUOUS_PT_FIRST_PERSON,
    ARTICLES,
    EN_FIRST_TO_THIRD,
    EN_KEEP_AFTER_I,
    EXCLUDED_OBJECTS,
    FUTURE,
    FUTURE_TIME,
    HABITUAL,
    HAVE_VERBS,
    HEDGE,
    INDIRECT_PT_VERBS,
    KIN,
    LIKE_BLOCKERS,
    MILESTONE,
    NEGATIONS,
    ORG_PREFIXES,
    ORG_SUFFIXES,
    PATTERNS,
    PLACE_NAMES,
    PLACE_PREFIXES,
    PRE_NOMINAL,
    PT_AFTER_AMBIGUOUS_VERB,
    PT_FIRST_TO_THIRD,
    RETRACTION,
    SPECULATION,
    TEMPORAL,
    KinSpec,
    PatternIndex,
    RelationPattern,
    is_profession,
    pt_first_to_third,
)
from memory_core.cognition.offline.relative_dates import local_date, resolve_relative_dates
from memory_core.cognition.offline.text import (
    INITIAL_STOP,
    WORD_RE,
    Language,
    alias_key,
    detect_language,
    find_names,
    fold_aligned,
    fold_word,
    is_question,
    is_small_talk,
    sentence_spans,
    word_count,
)
from memory_core.cognition.skill import SkillOutcome
from memory_core.write.attribute_keys import is_single_valued
from memory_core.write.naming import normalize_entity_type

__all__ = ["EXTRACT_BLIND", "EXTRACT_INFORMED", "OfflineExtractionSkill", "extract"]

EXTRACT_INFORMED = "extract_informed"
EXTRACT_BLIND = "extract_blind"


def _words(blob: str) -> frozenset[str]:
    """A word set from a whitespace-separated blob (keeps the tables readable)."""
    return frozenset(blob.split())


_MIN_FACT_WORDS = 3
_MAX_CLAUSE_DEPTH = 2
_SHORT_REACTION_WORDS = 5
_OPENING_PHRASE_CHARS = 40

# How sure we are of an entity's type; the strongest evidence across the message wins.
_RANK_KNOWN = 100
_RANK_KIN = 90
_RANK_PATTERN = 80
_RANK_LEXICON = 70
_RANK_CONTEXT = 50
_RANK_ACRONYM = 40
_RANK_SHAPE = 20
_RANK_OTHER = 10
_MAX_PERSON_WORDS = 2
_ACRONYM_MAX = 6
_ANCHOR_STEPS = 8
_CONTEXT_WINDOW = 48

_KEY_CATEGORY: dict[str, ImportanceCategory] = {
    "location.residence": "relationship_change",
    "work.employer": "relationship_change",
    "work.occupation": "relationship_change",
    "relationship.partner": "relationship_change",
    "relationship.friend": "relationship_change",
    "location.hometown": "biographical_milestone",
    "family.parent": "biographical_milestone",
    "family.sibling": "biographical_milestone",
    "family.child": "biographical_milestone",
    "family.relative": "biographical_milestone",
    "education.school": "biographical_milestone",
    "preference.like": "stable_preference",
    "preference.dislike": "stable_preference",
    "pet": "stable_preference",
    "goal.plan": "specific_event",
}

_SPEAKER_SUBJECTS = frozenset({"i", "i'm", "i've", "i'll", "i'd", "eu", "we", "we're", "we've", "nós"})
_THIRD_PERSON = frozenset({"he", "she", "ele", "ela"})
_POSSESSIVES_1P = frozenset({"my", "our", "meu", "minha", "meus", "minhas", "nosso", "nossa", "nossos", "nossas"})
_PT_POSSESSIVE_ARTICLE = {"meu": "o", "minha": "a", "meus": "os", "minhas": "as"}
_GROUP_NOUNS = _words("children parents folks family familia pais filhos irmaos avos primos amigos colegas")
_PT_THIRD_FORMS = frozenset(PT_FIRST_TO_THIRD.values())
# Portuguese verb forms count as Portuguese when detecting a sentence's language, except the few
# that are also common English words.
_PT_VERB_WORDS = (frozenset(PT_FIRST_TO_THIRD) | _PT_THIRD_FORMS) - {"to", "come", "ta"}
_THIRD_POSSESSIVES = _words("his her their seu sua seus suas")
_INDEFINITE = frozenset({"a", "an", "um", "uma"})
_DEFINITE = frozenset({"o", "a", "os", "as", "the"})
# "o meu irmão" -> "o irmão de Rafael": these words already carry the article.
_PT_ARTICLE_WORDS = _words("o a os as do da dos das no na nos nas ao aos à às pelo pela pelos pelas num numa dum duma")
_PT_CONTRACTIONS: dict[str, dict[str, str]] = {
    "de": {"o": "do", "a": "da", "os": "dos", "as": "das"},
    "em": {"o": "no", "a": "na", "os": "nos", "as": "nas"},
    "por": {"o": "pelo", "a": "pela", "os": "pelos", "as": "pelas"},
    "a": {"o": "ao", "a": "à", "os": "aos", "as": "às"},
}
_PT_CLITICS = frozenset({"se", "me", "te", "lhe", "nos", "vos"})
# "é", "era", "foi", "será", "seria", "de" (accent-folded) before "me" + infinitive, after a speaker
# possessive: "Meu sonho é me casar", "minha ideia de me mudar".
_PT_COPULAS_BEFORE_INFINITIVE = frozenset({"e", "era", "foi", "sera", "seria", "de"})
_PT_PRE_VERBAL = frozenset(
    {"nao", "também", "tambem", "ja", "ainda", "nunca", "sempre", "so", "quase", "realmente", "jamais", "se", "me"}
)
_PT_CLAUSE_OPENERS = _words(
    "e mas que quando porque pois ou entao ai depois hoje ontem amanha agora tambem ja enquanto onde se como "
    "assim logo antes finalmente recentemente atualmente"
)
_ANCHOR_SKIP = (
    ADVERBS_EN
    | ADVERBS_PT
    | _words(
        "have has had will would did do does 've is am are was were been be going gonna to want wants wanted "
        "plan plans planning planned decided hope hoping trying try tried need needs needed finally just "
        "vai vou vamos quero quer queria pretendo pretende acabei acabou de se me te lhe a o 's 'm 're "
        "precisa preciso vai tem tenho longer anymore mais"
    )
)
_LEADING_SKIP = _words(
    "yesterday today tonight tomorrow now then so well also recently lately finally actually anyway btw "
    "ontem hoje amanha agora entao bom bem ah oh alias enfim recentemente finalmente tambem depois "
    "last this next week weekend morning night month year semana passada passado mes ano manha noite"
)
# "I think (that) ...", "Acho que ...": hedges that do not change who the sentence is about.
_LEADING_HEDGE = re.compile(
    r"(?:i\s+(?:think|believe|guess|suppose|heard)|(?:eu\s+)?acho|acredito|parece|maybe|perhaps|probably|"
    r"talvez|provavelmente|apparently|aparentemente|(?:eu\s+)?soube|ouvi\s+dizer)(?:\s+(?:that|que))?[\s,]+",
    re.IGNORECASE,
)
# A request to the assistant carries no fact about anyone; "remember that ..." carries one after it.
_REQUEST = re.compile(
    r"^(?:please\s+|por\s+favor,?\s+)?(?:tell|show|give|help|explain|describe|list|find|search|write|make|"
    r"let's|let\s+me\s+know|can\s+you|could\s+you|would\s+you|will\s+you|me\s+(?:conta|conte|diga|diz|fala|fale|"
    r"explica|explique|ajuda|ajude|mostra|mostre)|conta|conte|diga|fala|fale|explica|explique|ajuda|ajude|"
    r"mostra|mostre|(?:pode|poderia)\s+me|voc[eê]\s+pode)\b",
    re.IGNORECASE,
)
_REMEMBER = re.compile(
    r"^(?:please\s+|por\s+favor,?\s+)?(?:remember|note|keep\s+in\s+mind|lembr[ae](?:-se)?|anota(?:\s+a[ií])?|"
    r"guarda|grava)(?:\s+(?:that|que|de\s+que|isso|this))?\s*[:,]?\s+",
    re.IGNORECASE,
)
# Conversational openers ("Fun fact:", "Guess what,", "Olha só:", "Sabia que ..."): not names, and
# not part of what is remembered. Those followed by punctuation need it ("So I moved" keeps "So").
_OPENER = re.compile(
    r"^(?:(?:fun\s+fact|guess\s+what|you\s+know\s+what|by\s+the\s+way|btw|hmm+|hm+|well|anyways?|so|oh|ah|"
    r"honestly|actually|(?:big|good|great|some)\s+news|news|update|sure|ok(?:ay)?|yeah|yes|wow|ugh|oops|"
    r"cool|nice|great|awesome|alright|olha(?:\s+s[óo])?|ali[aá]s|ent[aã]o|enfim|tipo|nossa|pois\s+[eé]|cara|"
    r"sinceramente|novidade|(?:boa\s+)?not[ií]cia(?:\s+boa)?|beleza|claro|aff|poxa|caramba|puxa|eita|uau|opa)"
    r"[ \t]*[:,][ \t]*|(?:did\s+you\s+know(?:\s+that)?|(?:voc[eê]\s+)?sabia\s+que)\s+)",
    re.IGNORECASE,
)
_MAX_OPENERS = 2
# A greeting before a comma ("Hi, I moved to Porto", "Oi, eu sou o Sam"): small talk, not part of a fact.
_GREETING_COMMA = re.compile(r"^([^,]{1,30}),[ \t]*(?=\S)")
# Name introductions: what follows is the speaker's name. The unambiguous ones ("my name is", "me
# chamo", "sou o/a") always; the copula alone ("I'm X", "sou X") only after a greeting or when X is
# the speaker's own name, since "I'm Brazilian" names no one.
_INTRODUCTION = re.compile(
    r"^(?:(?P<named>my\s+name(?:'s|’s|\s+is)|(?:you\s+can\s+|just\s+)?call\s+me|(?:eu\s+)?me\s+chamo|chamo-me|"
    r"meu\s+nome\s+[ée]|(?:voc[eê]\s+)?pode\s+me\s+chamar\s+de|(?:eu\s+)?sou\s+(?:o|a))|"
    r"(?P<copula>i'm|i’m|i\s+am|(?:eu\s+)?sou))[ \t]+",
    re.IGNORECASE,
)
_INTRODUCTION_EN = re.compile(r"^(?:my|you|just|call|i)\b", re.IGNORECASE)
_NAME_WORD = re.compile(r"[^\W\d_][\w'’-]*")
_MAX_NAME_WORDS = 3
# After the name: the end of the sentence, or another clause ("I'm Sam and I have a cat").
_AFTER_NAME = re.compile(r"^[ \t]*(?:[.!]*[ \t]*$|,?[ \t]+(?:and|e)[ \t]+(?P<rest>\S.*)$)", re.IGNORECASE | re.DOTALL)
# What a sentence that only says someone is themself is made of, besides that name twice.
_TAUTOLOGY_WORDS = _words("is am are was be é e sou era foi o a the name nome de se chama chamo called named s")
_PAREN = re.compile(r"[ \t]*\(([^()]{1,80})\)")
_NAMED_GAP = re.compile(r"[ \t]*,?[ \t]*(?:(?:named|called|chamad[oa]|de\s+nome|o|a)[ \t]+)?", re.IGNORECASE)
_NAMED_LATER = re.compile(
    r"(?:(?:'s|’s)\s+name\s+is|[ \t]+(?:se\s+chama|chama-se|se\s+chamava|is\s+called|is\s+named|was\s+called|"
    r"was\s+named|name\s+is|is|was|é|era))[ \t]+(?:(?:o|a)[ \t]+)?",
    re.IGNORECASE,
)
_NAMED_BEFORE_GAP = re.compile(r"[ \t]*(?:,|\(|\b(?:is|was|é|era|será|sera|will\s+be)\b)?[ \t]*", re.IGNORECASE)
_OF_NAME = re.compile(r"[ \t]+(?:de|do|da|dos|das|of)[ \t]+", re.IGNORECASE)
_ROLE_FOLLOWS = re.compile(r"[ \t]+(?:como|as)\b", re.IGNORECASE)
_CLAUSE_BREAK = re.compile(r"\s*[,;]\s*(?:(?:and|but|e|mas)\s+)?|\s+(?:and|but|e|mas|while|enquanto)\s+", re.I)
_PLACE_CONTEXT = re.compile(
    r"(?:\b(?:in|em|no|na|nos|nas|from|near|perto\s+de)|\b(?:went|go|goes|going|moved|move|moving|travel(?:l?ed)?|"
    r"travel(?:l?ing)?|flew|fly|flying|drove|drive|driving|trip|back|came|come|coming|vou|vai|vamos|fui|foi|"
    r"fomos|foram|mudei|mudou|viajei|viajou|viajar|viagem|voltei|voltou|voltar|ir|indo|chegar|cheguei|chegou)"
    r"\s+(?:back\s+)?(?:to|para|pra|pro|pras|a|ao|à))\s+(?:(?:the|o|a|os|as)\s+)?$",
    re.IGNORECASE,
)
# The joint of a compound subject, ending where the next member starts: "João e ", "Ana and ", "eu e a ".
_JOINT = re.compile(r"(?:\s*,\s*|\s+(?:e|and|&)\s+(?:(?:o|a)\s+)?)$", re.IGNORECASE)
_THE_BEFORE = re.compile(r"\bthe\s+$", re.IGNORECASE)
_OBJECT_STOP = _words("and but because when while since so or e mas porque quando enquanto ou pois que which who")
_ROLE_STOP = _words(
    "at in for with and but since na no em e mas desde pela pelo com há ha para pra where onde because porque "
    "who que which"
)
_REACTION = re.compile(r"^(?:oh|ah|wow|nice|cool|haha|lol|yeah|nossa|ah|puxa|caramba|que)\b|!\s*$", re.IGNORECASE)
_OBJECT_LEADS = ARTICLES | _words("de do da dos das")
_SPACES = re.compile(r"[ \t]{2,}")
_SPACE_BEFORE_PUNCT = re.compile(r"[ \t]+([,.;:!?])")
_DOUBLE_COMMA = re.compile(r",(?:\s*,)+")
_EN_BARE_START = _words(
    "love loved hate hated miss missed need needed want wanted have had just finally really also still "
    "went met got saw bought took made came left found began became ate drank ran wrote felt spent"
)


def _f(word: str) -> str:
    """Folded word (ASCII fast path); curly apostrophes become straight ones."""
    if word.isascii():
        return word.lower()
    return fold_word(word).replace("’", "'")


@dataclass(frozen=True, slots=True)
class _Ref:
    """An entity reference: its canonical name, the folded key, and whether it is the speaker."""

    name: str
    key: str
    is_speaker: bool = False


@dataclass(slots=True)
class _Mention:
    start: int
    end: int  # end of the mention including an alias/hint parenthetical
    name_end: int  # end of the name itself
    surface: str
    ref: _Ref
    rank: int
    type: str
    possessive: bool = False
    alias: str | None = None


@dataclass(slots=True)
class _EntityInfo:
    name: str
    type: str
    rank: int
    order: int
    aliases: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Sentence:
    text: str
    language: Language
    tokens: list[re.Match[str]]
    folded: list[str]
    mentions: list[_Mention]
    by_start: dict[int, _Mention]
    by_end: dict[int, _Mention]


@dataclass(slots=True)
class _Hit:
    pattern: RelationPattern
    start: int
    end: int
    source: _Ref | None
    target: _Mention | None
    negated: bool
    future: bool


@dataclass(slots=True)
class _KinLink:
    spec: KinSpec
    possessor: _Ref | None
    named: _Mention | None
    ex: bool
    # "Ana é minha esposa", "minha esposa se chama Ana", "I have a dog named Rex": the sentence states
    # the relationship, rather than naming someone in passing ("fui ao cinema com minha namorada Júlia").
    predicative: bool


class _Registry:
    """Entity names seen in one message: canonical names, aliases, known entities and best types."""

    def __init__(self, speaker_name: str, known: list[KnownEntity]) -> None:
        self.speaker = _Ref(speaker_name, alias_key(speaker_name), True)
        words = self.speaker.key.split()
        self._speaker_first = words[0] if len(words) > 1 else None
        self._alias: dict[str, _Ref] = {}
        self._known_type: dict[str, str] = {}
        searchable: dict[str, _Ref] = {}
        for entity in known:
            display_key = alias_key(entity.display_name)
            ref = self.speaker if display_key == self.speaker.key else _Ref(entity.display_name, display_key)
            self._known_type[ref.key] = normalize_entity_type(entity.entity_type)
            for name in (entity.name, entity.display_name):
                key = alias_key(name)
                if key:
                    self._alias[key] = ref
                    searchable.setdefault(key, ref)
        # Longest first, so "clara rezende" wins over "clara" where both are known.
        self._searchable = sorted(searchable.items(), key=lambda item: (-len(item[0]), item[0]))
        self.entities: dict[str, _EntityInfo] = {}

    def resolve(self, surface: str) -> _Ref:
        key = alias_key(surface)
        ref = self._alias.get(key)
        if ref is not None:
            return ref
        if key in (self.speaker.key, self._speaker_first):
            return self.speaker
        return _Ref(surface, key)

    def known_type(self, ref: _Ref) -> str | None:
        return "person" if ref.is_speaker else self._known_type.get(ref.key)

    def is_alias(self, surface: str) -> bool:
        return alias_key(surface) in self._alias

    def add_alias(self, surface: str, ref: _Ref) -> None:
        self._alias.setdefault(alias_key(surface), ref)

    def find_known(self, folded: str) -> list[tuple[int, int, _Ref]]:
        """Word-boundary, case- and accent-insensitive occurrences of known names in ``folded``."""
        found: list[tuple[int, int, _Ref]] = []
        for key, ref in self._searchable:
            index = folded.find(key)
            while index >= 0:
                end = index + len(key)
                bounded = (index == 0 or not folded[index - 1].isalnum()) and (
                    end == len(folded) or not folded[end].isalnum()
                )
                if bounded and all(end <= start or index >= stop for start, stop, _ in found):
                    found.append((index, end, ref))
                index = folded.find(key, index + 1)
        return sorted(found, key=lambda item: item[0])

    def note(self, mention: _Mention) -> None:
        """Record a mention: its entity, best type so far and any alias it was written with."""
        ref = mention.ref
        if ref.is_speaker:
            return
        info = self.entities.get(ref.key)
        if info is None:
            info = _EntityInfo(name=ref.name, type=mention.type, rank=mention.rank, order=len(self.entities))
            self.entities[ref.key] = info
        elif mention.rank > info.rank:
            info.type, info.rank = mention.type, mention.rank
        for alias in (mention.alias, mention.surface):
            if alias and alias_key(alias) != ref.key and alias not in info.aliases:
                info.aliases.append(alias)


# --- sentence preparation --------------------------------------------------------------


def _static_type(text: str, start: int, surface: str) -> tuple[int, str]:
    """Type evidence from the name itself and the words just before it."""
    key = alias_key(surface)
    words = surface.split()
    first, last = _f(words[0]), _f(words[-1])
    if key in PLACE_NAMES:
        return _RANK_LEXICON, "place"
    if len(words) > 1 and (last in ORG_SUFFIXES or last.rstrip(".") in ORG_SUFFIXES):
        return _RANK_LEXICON, "organization"
    if len(words) > 1 and first in ORG_PREFIXES:
        return _RANK_LEXICON, "organization"
    if len(words) > 1 and first in PLACE_PREFIXES:
        return _RANK_LEXICON, "place"
    if surface.isupper() and surface.isalpha() and 2 <= len(surface) <= _ACRONYM_MAX:
        return _RANK_ACRONYM, "organization"  # place acronyms (SP, NYC) are in the gazetteer above
    if _PLACE_CONTEXT.search(text, max(0, start - _CONTEXT_WINDOW), start):
        return _RANK_CONTEXT, "place"
    if _THE_BEFORE.search(text, max(0, start - 5), start):
        return _RANK_OTHER, "other"  # "the Beatles", "the Avengers": people are not "the X" in English
    if any(ch.isdigit() for ch in surface):
        return _RANK_OTHER, "other"
    capitalised = sum(1 for word in words if word[:1].isupper())
    if capitalised <= _MAX_PERSON_WORDS:
        return _RANK_SHAPE, "person"
    return _RANK_OTHER, "other"


def _mention(text: str, start: int, end: int, registry: _Registry, possessive: bool = False) -> _Mention:
    surface = text[start:end]
    ref = registry.resolve(surface)
    known_type = registry.known_type(ref) if registry.is_alias(surface) or ref.is_speaker else None
    if known_type is not None:
        rank, entity_type = _RANK_KNOWN, known_type
    else:
        rank, entity_type = _static_type(text, start, surface)
    alias = surface if alias_key(surface) != ref.key else None
    return _Mention(start, end, end, surface, ref, rank, entity_type, possessive, alias)


def _prepare(text: str, language: Language, registry: _Registry) -> _Sentence:
    tokens = list(WORD_RE.finditer(text))
    folded = [_f(token.group()) for token in tokens]
    known = registry.find_known(fold_aligned(text))
    names = find_names(text)
    kept_known: list[tuple[int, int, _Ref]] = []
    for start, end, ref in known:
        # A longer detected name around a known one is a different entity ("Ana Paula" vs known "Ana").
        container = next(
            (n for n in names if n.start <= start and end <= n.end and n.end - n.start > end - start), None
        )
        if container is not None and not registry.is_alias(container.text):
            continue
        kept_known.append((start, end, ref))
    mentions = [_mention(text, start, end, registry) for start, end, _ in kept_known]
    for name in names:
        if any(name.start < end and start < name.end for start, end, _ in kept_known):
            continue
        if tokens and name.start == tokens[0].start() and " " not in name.text and _is_verb_form(name.text):
            continue  # "Odeio acordar cedo", "Trabalho na Vertix": a capitalised verb, not a name
        mentions.append(_mention(text, name.start, name.end, registry, name.possessive))
    mentions.sort(key=lambda mention: mention.start)
    mentions = _group_parentheticals(text, mentions, registry)
    by_start: dict[int, _Mention] = {}
    by_end: dict[int, _Mention] = {}
    for mention in mentions:
        by_start.setdefault(mention.start, mention)
        by_end[mention.end] = mention
        by_end.setdefault(mention.name_end, mention)
    return _Sentence(text, language, tokens, folded, mentions, by_start, by_end)


def _group_parentheticals(text: str, mentions: list[_Mention], registry: _Registry) -> list[_Mention]:
    """Merge "Guili (Guilherme Maturana)" into one mention; absorb hints like "(namorada do Rafael)"."""
    result: list[_Mention] = []
    absorbed: set[int] = set()
    for index, mention in enumerate(mentions):
        if index in absorbed:
            continue
        paren = _PAREN.match(text, mention.name_end)
        if paren is None:
            result.append(mention)
            continue
        content = paren.group(1).strip()
        inner = [
            (position, other)
            for position, other in enumerate(mentions)
            if other.start >= paren.start(1) and other.name_end <= paren.end(1)
        ]
        if len(inner) == 1 and inner[0][1].surface == content:
            position, other = inner[0]
            absorbed.add(position)
            result.append(_merge_alias(mention, other, paren.end(), registry))
            continue
        hint = next((KIN[word] for word in (_f(w.group()) for w in WORD_RE.finditer(content)) if word in KIN), None)
        if hint is not None:
            mention.end = paren.end()  # the hint belongs to the mention, not to the entity's name
            if mention.rank < _RANK_KIN:
                mention.rank, mention.type = _RANK_KIN, hint.named_type
        result.append(mention)
    return result


def _merge_alias(first: _Mention, second: _Mention, end: int, registry: _Registry) -> _Mention:
    """One entity for a name and its parenthetical alias: the known one, else the more complete name."""

    def strength(mention: _Mention) -> tuple[int, int, int]:
        known = 1 if mention.rank >= _RANK_KNOWN else 0
        return known, len(mention.surface.split()), len(mention.surface)

    main, other = (first, second) if strength(first) >= strength(second) else (second, first)
    registry.add_alias(first.surface, main.ref)
    registry.add_alias(second.surface, main.ref)
    best = first if first.rank >= second.rank else second
    alias = other.surface if alias_key(other.surface) != main.ref.key else None
    return _Mention(first.start, end, first.name_end, first.surface, main.ref, best.rank, best.type, False, alias)


# --- subject, anchors, patterns --------------------------------------------------------


def _word_back(text: str, end: int) -> str:
    start = end
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "'’-"):
        start -= 1
    return text[start:end]


def _is_relative_noun(folded: str) -> bool:
    """A relationship or pet noun, singular or plural ("sister", "kids", "meus pais")."""
    if folded in KIN or folded in _GROUP_NOUNS:
        return True
    return (folded.endswith("s") and folded[:-1] in KIN) or (folded.endswith("es") and folded[:-2] in KIN)


def _is_verb_form(word: str) -> bool:
    """A Portuguese first- or third-person form from the verb table ("Odeio", "Mora")."""
    return pt_first_to_third(word) is not None or word.lower() in _PT_THIRD_FORMS


def _first_person_pt(word: str) -> bool:
    """A Portuguese first-person verb form whose third person differs ("moro", not "disse")."""
    third = pt_first_to_third(word)
    return third is not None and _f(third) != _f(word)


def _pt_verb_at(s: _Sentence, index: int) -> bool:
    """Whether token ``index`` is a first-person verb in a verb position."""
    token = s.tokens[index]
    if not _first_person_pt(token.group()) or token.start() in s.by_start:
        return False
    if token.group().lower() not in AMBIGUOUS_PT_FIRST_PERSON:
        return True
    previous = index - 1
    while previous >= 0 and s.folded[previous] in _PT_PRE_VERBAL:
        previous -= 1
    opener = (
        previous < 0
        or s.folded[previous] in _PT_CLAUSE_OPENERS
        or any(ch in ",;:" for ch in s.text[s.tokens[previous].end() : token.start()])
    )
    follows = index + 1 < len(s.tokens) and s.folded[index + 1] in PT_AFTER_AMBIGUOUS_VERB
    return opener and follows


def _named_after(s: _Sentence, index: int) -> _Mention | None:
    """The name right after a relationship noun: "my sister Ana", "um cachorro chamado Thor"."""
    gap = _NAMED_GAP.match(s.text, s.tokens[index].end())
    position = gap.end() if gap else s.tokens[index].end()
    return s.by_start.get(position)


def _find_subject(s: _Sentence, registry: _Registry, antecedent: _Ref | None) -> tuple[_Ref, tuple[int, int] | None]:
    """Who the sentence is about, and the span of a he/she pronoun standing for ``antecedent``."""
    speaker = registry.speaker
    tokens, folded = s.tokens, s.folded
    count = len(tokens)
    index = 0
    while index < count:
        hedge = _LEADING_HEDGE.match(s.text, tokens[index].start())
        if hedge is not None and hedge.end() > tokens[index].end():
            index = next((i for i in range(index, count) if tokens[i].start() >= hedge.end()), count)
            continue
        if folded[index] in _LEADING_SKIP and tokens[index].start() not in s.by_start:
            index += 1
            continue
        break
    if index >= count:
        return speaker, None
    word = folded[index]
    if word in _SPEAKER_SUBJECTS and (word != "i" or tokens[index].group() in ("I", "i")):
        return speaker, None
    if s.language == "pt":
        verb = index
        while verb < count and folded[verb] in ADVERBS_PT:
            verb += 1
        if verb < count:
            if folded[verb] == "me" and verb + 1 < count and pt_first_to_third(tokens[verb + 1].group()):
                return speaker, None
            if _pt_verb_at(s, verb):
                return speaker, None
    mention = s.by_start.get(tokens[index].start())
    possessive = index
    if mention is None and word in _DEFINITE and index + 1 < count:
        mention = s.by_start.get(tokens[index + 1].start())
        if mention is None and folded[index + 1] in _POSSESSIVES_1P:
            possessive = index + 1
    if mention is None and folded[possessive] in _POSSESSIVES_1P:
        noun = possessive + 1
        while noun < count and folded[noun] in PRE_NOMINAL:
            noun += 1
        if noun < count and folded[noun] in KIN:
            named = _named_after(s, noun)
            if named is not None:
                return named.ref, None
        return speaker, None
    if mention is not None:
        if mention.possessive:
            noun = index + 1
            while noun < count and folded[noun] in PRE_NOMINAL:
                noun += 1
            if noun < count and folded[noun] in KIN:
                named = _named_after(s, noun)
                if named is not None:
                    return named.ref, None
        return mention.ref, None
    if word in _THIRD_PERSON and antecedent is not None:
        return antecedent, (tokens[index].start(), tokens[index].end())
    # "Em Lisboa, Ana trabalha na Vertix": a name right after an opening phrase and its comma.
    comma = s.text.find(",", 0, _OPENING_PHRASE_CHARS)
    if comma > 0:
        after = next((token for token in tokens if token.start() > comma), None)
        opened = s.by_start.get(after.start()) if after is not None else None
        if opened is not None and not opened.possessive:
            return opened.ref, None
    return speaker, None


def _anchor(
    s: _Sentence, position: int, trigger: str, *, subject: _Ref, registry: _Registry, antecedent: _Ref | None
) -> tuple[_Ref | None, bool, int]:
    """Who does what a trigger at ``position`` says: the name/pronoun just before it, else the subject.

    Walks back over adverbs, auxiliaries and negations ("I don't really like") and returns
    ``(None, ...)`` for an unnamed relative ("my sister lives in Rio": not the speaker). The
    third value is where the doer's words start, for compound subjects ("Ana and I live...").
    """
    text = s.text
    negated = False
    cursor = position
    for _ in range(_ANCHOR_STEPS):
        end = cursor
        while end > 0 and text[end - 1] in " \t":
            end -= 1
        mention = s.by_end.get(end)
        if mention is not None:
            return mention.ref, negated, mention.start
        word = _word_back(text, end)
        if not word:
            break
        folded = _f(word)
        start = end - len(word)
        if folded in _SPEAKER_SUBJECTS and (folded != "i" or word in ("I", "i")):
            return registry.speaker, negated, start
        if folded in NEGATIONS:
            negated = True
        elif _is_relative_noun(folded):
            return None, negated, _phrase_start(text, start)
        elif folded in _THIRD_PERSON:
            return antecedent, negated, start
        elif folded not in _ANCHOR_SKIP:
            break
        cursor = start
    if s.language == "pt" and (_f(trigger) == "me" or _first_person_pt(trigger)):
        return registry.speaker, negated, position
    return subject, negated, position


def _phrase_start(text: str, start: int) -> int:
    """Start of "my best friend" / "a minha irmã" given the start of its noun."""
    while True:
        end = start
        while end > 0 and text[end - 1] in " \t":
            end -= 1
        word = _word_back(text, end)
        folded = _f(word)
        if not word or not (folded in PRE_NOMINAL or folded in _POSSESSIVES_1P or folded in _DEFINITE):
            return start
        start = end - len(word)


def _strong_type(mention: _Mention) -> str | None:
    return mention.type if mention.rank >= _RANK_LEXICON else None


def _condition_ok(pattern: RelationPattern, target: _Mention, text: str) -> bool:
    strong = _strong_type(target)
    condition = pattern.condition
    if condition == "not_org":
        return strong != "organization"
    if condition == "not_org_person":
        return strong not in ("organization", "person")
    if condition == "not_place":
        return strong != "place"
    if condition == "not_place_person":
        return strong not in ("place", "person")
    if condition == "org":
        return strong == "organization"
    if condition == "org_or_role":
        organization = strong == "organization" or (target.rank == _RANK_ACRONYM and target.type == "organization")
        return organization or (strong != "place" and _ROLE_FOLLOWS.match(text, target.end) is not None)
    return True


def _object_words(raw: str, stop: frozenset[str]) -> list[str]:
    words: list[str] = []
    for word in raw.split():
        if _f(word) in stop:
            break
        words.append(word)
    return words


def _object_target(s: _Sentence, start: int, words: list[str]) -> _Mention | None:
    mention = s.by_start.get(start)
    if mention is None and len(words) > 1 and _f(words[0]) in _OBJECT_LEADS:
        mention = s.by_start.get(start + len(words[0]) + 1)
    return mention


def _hits(s: _Sentence, subject: _Ref, registry: _Registry, antecedent: _Ref | None, index: PatternIndex) -> list[_Hit]:
    hits: list[_Hit] = []
    text = s.text
    # Plans and speculation ("next year", "talvez", "pode ser que") do not change where anyone lives
    # or works yet: such matches fill goal.plan and make no relation.
    future_time = FUTURE_TIME.search(text) is not None or SPECULATION.search(text) is not None
    lowered: str | None = text.lower()
    if lowered is not None and len(lowered) != len(text):
        lowered = None  # a rare character whose lower case is longer ("İ"): positions would shift
    for pattern in index.candidates(token.group().lower() for token in s.tokens):
        for match in pattern.finditer(text, lowered):
            target: _Mention | None = None
            if pattern.target == "name":
                target = s.by_start.get(match.end())
                if target is None or not _condition_ok(pattern, target, text):
                    continue
            else:
                stop_words = _ROLE_STOP if pattern.target == "role" else _OBJECT_STOP
                words = _object_words(match.group("obj"), stop_words)
                if not words:
                    continue
                if pattern.target == "profession" and not any(is_profession(word) for word in words[:3]):
                    continue
                if pattern.target == "object":
                    if _f(words[0]) in EXCLUDED_OBJECTS:
                        continue
                    if pattern.kind == "likes" and _f(_word_back(text, _skip_space_back(text, match.start()))) in (
                        LIKE_BLOCKERS
                    ):
                        continue
                    target = _object_target(s, match.start("obj"), words)
            trigger = _word_at(text, match.start())
            source, negated, doer_start = _anchor(
                s, match.start(), trigger, subject=subject, registry=registry, antecedent=antecedent
            )
            partners = _conjoined(s, doer_start, registry)
            if source is None and partners:
                source, partners = partners[0], partners[1:]  # "Eu e minha esposa moramos": at least the speaker
            future = future_time or FUTURE.search(text, 0, match.end()) is not None
            hits.append(_Hit(pattern, match.start(), match.end(), source, target, negated, future))
            for partner in partners:
                if source is not None and partner.key != source.key:
                    hits.append(_Hit(pattern, match.start(), match.end(), partner, target, negated, future))
    hits.sort(key=lambda hit: hit.start)
    return hits


def _conjoined(s: _Sentence, position: int, registry: _Registry) -> list[_Ref]:
    """Other members of a compound subject that ends at ``position``: "João e Maria", "Ana and I"."""
    members: list[_Ref] = []
    cursor = position
    while True:
        joint = _JOINT.search(s.text, 0, cursor)
        # A list closes with "e"/"and" ("Ana, Pedro e Júlia"); a lone comma is not a compound subject
        # ("Em Lisboa, Ana trabalha...").
        if joint is None or (not members and joint.group().strip() == ","):
            break
        previous = s.by_end.get(joint.start())
        if previous is not None:
            members.append(previous.ref)
            cursor = previous.start
            continue
        word = _word_back(s.text, joint.start())
        if word in {"I", "i", "eu", "Eu"}:
            members.append(registry.speaker)
            cursor = joint.start() - len(word)
            continue
        break
    return members


def _skip_space_back(text: str, end: int) -> int:
    while end > 0 and text[end - 1] in " \t":
        end -= 1
    return end


def _word_at(text: str, start: int) -> str:
    match = WORD_RE.match(text, start)
    return match.group() if match else ""


def _kin_links(s: _Sentence, subject: _Ref, registry: _Registry, antecedent: _Ref | None) -> list[_KinLink]:
    """Relationship and pet nouns with their possessor and the named person or animal."""
    links: list[_KinLink] = []
    tokens, folded = s.tokens, s.folded
    for index, token in enumerate(tokens):
        word = folded[index]
        ex = False
        if word.startswith("ex-"):
            word, ex = word[3:], True
        name_is = word.endswith("'s")
        if name_is:
            word = word[:-2]
        spec = KIN.get(word)
        if spec is None or token.start() in s.by_start:
            continue
        possessor, phrase_start = _possessor(s, index, subject, registry, antecedent)
        before = index - 1
        while before >= 0 and folded[before] in PRE_NOMINAL:
            ex = ex or folded[before] == "ex"
            before -= 1
        if possessor is None:
            of_name = _OF_NAME.match(s.text, token.end())
            owner = s.by_start.get(of_name.end()) if of_name else None
            possessor = owner.ref if owner else None
        named = None if name_is else _named_after(s, index)
        # "I have a dog named Rex", "tenho uma irmã chamada Ana": introducing someone states the relationship.
        predicative = named is not None and before >= 0 and folded[before] in _INDEFINITE
        if named is None:
            later = _NAMED_LATER.match(s.text, token.end() - 2 if name_is else token.end())
            named = s.by_start.get(later.end()) if later else None
            predicative = named is not None
        if named is None:
            named = _named_before(s, phrase_start)
            predicative = named is not None
        if named is not None and possessor is not None and named.ref.key == possessor.key:
            named = None
        links.append(_KinLink(spec, possessor, named, ex, predicative))
    return links


def _possessor(
    s: _Sentence, index: int, subject: _Ref, registry: _Registry, antecedent: _Ref | None
) -> tuple[_Ref | None, int]:
    """Whose relative/pet it is ("my" -> speaker, "Pedro's" -> Pedro, "I have a dog" -> speaker)."""
    tokens, folded = s.tokens, s.folded
    before = index - 1
    while before >= 0 and folded[before] in PRE_NOMINAL:
        before -= 1
    if before < 0:
        return None, tokens[index].start()
    word = folded[before]
    if word in _POSSESSIVES_1P:
        start = tokens[before].start()
        if before > 0 and folded[before - 1] in ARTICLES:
            start = tokens[before - 1].start()
        return registry.speaker, start
    if word in _INDEFINITE:
        verb = before - 1
        while verb >= 0 and (folded[verb] in ADVERBS_EN or folded[verb] in ADVERBS_PT):
            verb -= 1
        if verb >= 0 and folded[verb] in HAVE_VERBS:
            owner, _, _ = _anchor(
                s, tokens[verb].start(), tokens[verb].group(), subject=subject, registry=registry, antecedent=antecedent
            )
            return owner, tokens[before].start()
        return None, tokens[before].start()
    named_owner = s.by_start.get(tokens[before].start())
    if named_owner is not None and named_owner.possessive:
        return named_owner.ref, tokens[before].start()
    if word in _THIRD_POSSESSIVES:
        # "Lucas got engaged to his girlfriend Marina": his = the person the sentence is about.
        return (None if subject.is_speaker else subject), tokens[before].start()
    if word in _DEFINITE:
        return None, tokens[before].start()
    return None, tokens[index].start()


def _named_before(s: _Sentence, phrase_start: int) -> _Mention | None:
    """The name a relationship phrase describes: "Ana é minha irmã", "Ana, my sister", "Carol (namorada...)"."""
    for mention in reversed(s.mentions):
        if mention.name_end > phrase_start:
            continue
        gap = _NAMED_BEFORE_GAP.fullmatch(s.text, mention.name_end, phrase_start)
        return mention if gap is not None and mention.name_end < phrase_start else None
    return None


# --- first person -> third person ------------------------------------------------------


def _case_like(model: str, word: str) -> str:
    return word[:1].upper() + word[1:] if model[:1].isupper() else word


def _lower_first(word: str) -> str:
    return word[:1].lower() + word[1:]


def _en_third(word: str) -> str:
    """Third person singular of an English present-tense verb ("like" -> "likes", "am" -> "is")."""
    lower = word.lower().replace("’", "'")
    mapped = EN_FIRST_TO_THIRD.get(lower)
    if mapped is not None:
        return _case_like(word, mapped if "’" not in word else mapped.replace("'", "’"))
    if lower in EN_KEEP_AFTER_I or not word.isalpha() or word[:1].isupper() or lower.endswith("ed"):
        return word
    if lower.endswith(("s", "sh", "ch", "x", "z", "o")):
        return word + "es"
    if len(lower) > 1 and lower.endswith("y") and lower[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


_EN_I_SUFFIX = {"i": "", "i'm": " is", "i've": " has", "i'll": " will", "i'd": " would"}


def _rewrite_en(s: _Sentence, speaker: str, replace: tuple[int, int] | None, replacement: str) -> tuple[str, bool]:
    """English: I/me/my/myself -> the speaker, and the verb after "I" to the third person."""
    text, tokens, folded = s.text, s.tokens, s.folded
    out: list[str] = []
    position = 0
    pending = False
    touched = False
    for index, token in enumerate(tokens):
        word = token.group()
        low = folded[index]
        out.append(text[position : token.start()])
        position = token.end()
        if replace is not None and token.start() == replace[0]:
            out.append(replacement)
            continue
        if low in _EN_I_SUFFIX:
            previous = folded[index - 1] if index else ""
            following = folded[index + 1] if index + 1 < len(tokens) else ""
            out.append(speaker + _EN_I_SUFFIX[low])
            pending = low == "i" and previous not in ("and", "or", "nor") and following not in ("and", "or")
            touched = True
        elif low in {"me", "myself"}:
            out.append(speaker)
            touched = True
        elif low in ("my", "mine"):
            out.append(speaker + "'s")
            touched = True
        elif pending:
            following = folded[index + 1] if index + 1 < len(tokens) else ""
            # "I no longer like" -> "Ana no longer likes": the verb comes after "no longer".
            no_longer = (low == "no" and following == "longer") or (low == "longer" and folded[index - 1] == "no")
            if (low in ADVERBS_EN and low != "not") or no_longer:
                out.append(word)
                continue
            out.append(_en_third(word))
            pending = False
        else:
            out.append(word)
    out.append(text[position:])
    return "".join(out), touched


def _rewrite_pt(s: _Sentence, speaker: str, replace: tuple[int, int] | None, replacement: str) -> tuple[str, bool]:
    """Portuguese: eu/me/mim/comigo/meu/minha -> the speaker, first-person verbs to the third person.

    "Eu moro" -> "Rafael mora"; "Me mudei" -> "Rafael se mudou"; "Minha esposa" -> "A esposa
    de Rafael"; "Ana me contratou" -> "Ana contratou Rafael"; a sentence that opens with a
    first-person verb gets the speaker's name inserted before it ("Moro em..." -> "Rafael mora em...").
    """
    text, tokens, folded = s.text, s.tokens, s.folded
    count = len(tokens)
    pieces: list[str] = []
    token_piece = [0] * count
    after: dict[int, str] = {}
    commas: list[int] = []
    inserts: list[int] = []
    pending = False
    emitted = False
    touched = False
    speaker_verb = -2  # index of the last verb turned from the speaker's first person
    possessive_seen = False
    position = 0
    for index, token in enumerate(tokens):
        word = token.group()
        low = folded[index]
        pieces.append(_with_commas(text[position : token.start()], position, commas))
        position = token.end()
        adjacent = index + 1 < count and not text[token.end() : tokens[index + 1].start()].strip()
        out = word
        if replace is not None and token.start() == replace[0]:
            out = replacement
        elif low == "eu":
            out, touched, emitted = speaker, True, True
            previous = folded[index - 1] if index else ""
            following = folded[index + 1] if index + 1 < count else ""
            pending = previous not in ("e", "ou") and following not in ("e", "ou")
        elif low == "mim":
            out, touched = speaker, True
        elif low == "comigo":
            out, touched = _case_like(word, "com") + " " + speaker, True
        elif low == "me":
            touched = True
            # Right after the speaker's own verb it is reflexive: "vou me mudar" -> "vai se mudar".
            reflexive = speaker_verb == index - 1
            if possessive_seen and index and folded[index - 1] in _PT_COPULAS_BEFORE_INFINITIVE:
                # "Meu plano é me mudar": the infinitive's subject is the speaker named by the possessive.
                out = _case_like(word, "se")
            elif pending or reflexive or (adjacent and pt_first_to_third(tokens[index + 1].group()) is not None):
                out = _case_like(word, "se")
                pending = True
                if not emitted:
                    inserts.append(_insertion_index(folded, index))
                    emitted = True
            elif adjacent:
                out = ""
                indirect = folded[index + 1] in INDIRECT_PT_VERBS
                after[index + 1] = " " + ("para " if indirect else "") + speaker
            else:
                out = speaker
        elif low.endswith("-me") and len(low) > 4:
            verb = word[:-3]
            indirect = _f(verb) in INDIRECT_PT_VERBS
            out, touched = verb + " " + ("para " if indirect else "") + speaker, True
        elif low in _PT_POSSESSIVE_ARTICLE:
            out = _pt_possessive(s, index, speaker, pieces=pieces, token_piece=token_piece, after=after, commas=commas)
            touched = possessive_seen = True
        elif pending:
            if low in ADVERBS_PT or low in _PT_CLITICS:
                pass
            else:
                third = pt_first_to_third(word)
                if third is not None:
                    out, speaker_verb = third, index
                pending = False
        elif _pt_verb_at(s, index):
            third = pt_first_to_third(word)
            if third is not None:
                out, touched, speaker_verb = third, True, index
                if not emitted:
                    inserts.append(_insertion_index(folded, index))
                    emitted = True
        pieces.append(out)
        token_piece[index] = len(pieces) - 1
        if index in after:
            pieces.append(after.pop(index))
    pieces.append(_with_commas(text[position:], position, commas))
    for index in sorted(set(inserts), reverse=True):
        piece = token_piece[index]
        if index == 0 and tokens[index].start() not in s.by_start:
            pieces[piece] = _lower_first(pieces[piece])
        pieces.insert(piece, speaker + " ")
    return "".join(pieces), touched


def _insertion_index(folded: list[str], index: int) -> int:
    """Where the speaker's name goes before a verb: before "não", "também", "se"... that precede it."""
    while index > 0 and folded[index - 1] in _PT_PRE_VERBAL:
        index -= 1
    return index


def _with_commas(gap: str, start: int, commas: list[int]) -> str:
    for comma in commas:
        offset = comma - start
        if 0 <= offset < len(gap) and gap[offset:].lstrip(" \t")[:1] not in (",", ".", ";", "!", "?", ":"):
            gap = gap[:offset] + "," + gap[offset:]
    return gap


def _pt_possessive(
    s: _Sentence,
    index: int,
    speaker: str,
    *,
    pieces: list[str],
    token_piece: list[int],
    after: dict[int, str],
    commas: list[int],
) -> str:
    """``meu/minha X`` -> ``o/a X de Rafael`` (contracting "de minha" -> "da", keeping "o meu" -> "o")."""
    text, tokens, folded = s.text, s.tokens, s.folded
    word = tokens[index].group()
    article = _PT_POSSESSIVE_ARTICLE[folded[index]]
    noun = index + 1
    while (
        noun < len(tokens)
        and folded[noun] in PRE_NOMINAL
        and not text[tokens[noun - 1].end() : tokens[noun].start()].strip()
    ):
        noun += 1
    has_noun = noun < len(tokens) and not text[tokens[noun - 1].end() : tokens[noun].start()].strip()
    if not has_noun:
        return "de " + speaker  # "o carro é meu" -> "o carro é de Rafael"
    previous = index - 1 if index > 0 and not text[tokens[index - 1].end() : tokens[index].start()].strip() else -1
    before = folded[previous] if previous >= 0 else ""
    if before in _PT_ARTICLE_WORDS:
        out = ""
    elif before in _PT_CONTRACTIONS:
        previous_word = tokens[previous].group()
        pieces[token_piece[previous]] = _case_like(previous_word, _PT_CONTRACTIONS[before][article])
        out = ""
    else:
        out = _case_like(word, article) if index == 0 or word[:1].isupper() else article
    suffix = " de " + speaker
    following = noun + 1
    if following < len(tokens) and text[tokens[noun].end() : tokens[following].start()] == " ":
        appositive = s.by_start.get(tokens[following].start())
        if appositive is not None:
            suffix += ","
            rest = text[appositive.end : appositive.end + 2]
            if len(rest) == 2 and rest[0] == " " and rest[1].islower():
                commas.append(appositive.end)
    after[noun] = after.get(noun, "") + suffix
    return out


def _tidy(text: str) -> str:
    text = _SPACES.sub(" ", text)
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    text = _DOUBLE_COMMA.sub(",", text).strip()
    if text[:1].islower():
        text = text[:1].upper() + text[1:]  # a fact is a sentence of its own
    return text


# --- the extractor ---------------------------------------------------------------------


_PATTERNS_BY_LANGUAGE: dict[str, PatternIndex] = {
    language: PatternIndex(tuple(pattern for pattern in PATTERNS if pattern.language == language))
    for language in ("en", "pt")
}


def _without_openers(sentence: str) -> str:
    """``sentence`` without its conversational openers, capitalised again ("Fun fact: my cat" -> "My cat")."""
    for _ in range(_MAX_OPENERS):
        opener = _OPENER.match(sentence)
        if opener is None or opener.end() == len(sentence):
            break
        sentence = sentence[opener.end() :]
        sentence = sentence[:1].upper() + sentence[1:]
    return sentence


def _without_greeting(sentence: str) -> tuple[str, bool]:
    """``sentence`` without a greeting before its first comma, and whether there was one ("Hi, I'm Sam")."""
    match = _GREETING_COMMA.match(sentence)
    if match is None or not is_small_talk(match.group(1)):
        return sentence, False
    rest = sentence[match.end() :]
    return rest[:1].upper() + rest[1:], True


def _introduction(sentence: str, greeted: bool, registry: _Registry) -> tuple[str, str, Language] | None:
    """The name a self-introduction gives, the clause after it and the language, or None.

    "I'm Sam and I have a cat." -> ("Sam", "I have a cat.", "en").
    """
    match = _INTRODUCTION.match(sentence)
    if match is None:
        return None
    position = match.end()
    words: list[str] = []
    while len(words) < _MAX_NAME_WORDS:
        word = _NAME_WORD.match(sentence, position)
        if word is None or not word.group()[:1].isupper():
            break
        words.append(word.group())
        position = word.end()
        spaced = re.match(r"[ \t]+(?=[^\W\d_])", sentence[position:])
        if spaced is None or not sentence[position + spaced.end() : position + spaced.end() + 1].isupper():
            break
        position += spaced.end()
    after = _AFTER_NAME.match(sentence[position:])
    if not words or after is None:
        return None
    name = " ".join(words)
    if match.group("copula") and not greeted and not registry.resolve(name).is_speaker:
        return None
    rest = after.group("rest") or ""
    language: Language = "en" if _INTRODUCTION_EN.match(sentence) else "pt"
    return name, rest[:1].upper() + rest[1:], language


def _is_tautology(text: str, subject: _Ref) -> bool:
    """True when ``text`` only says that its subject is itself ("Sam is Sam.", "O nome de Sam é Sam.")."""
    name = alias_key(subject.name).split()
    words = [alias_key(word) for word in WORD_RE.findall(text.replace("’", "'").replace("'s", " s"))]
    named = sum(1 for index in range(len(words)) if words[index : index + len(name)] == name)
    rest = [word for word in words if word not in name and word not in _TAUTOLOGY_WORDS]
    return bool(name) and named >= 2 and not rest


class _Extractor:
    """State of one extraction: the entity registry, facts, relations, and the last person talked about."""

    def __init__(self, skill_input: ExtractionInput, use_known: bool) -> None:
        self.speaker_name = " ".join(skill_input.speaker_name.split()) or "speaker"
        self.registry = _Registry(self.speaker_name, skill_input.known_entities if use_known else [])
        self.message = skill_input.message
        self.language = detect_language(skill_input.message, pt_words=_PT_VERB_WORDS)
        self.max_facts = skill_input.max_facts
        # The message's local calendar day: relative dates in its facts are resolved against it (W7).
        self.day = local_date(skill_input.occurred_at, skill_input.timezone)
        self.facts: list[ExtractedFact] = []
        self.relations: dict[tuple[str, str, str], ExtractedRelation] = {}
        self.fact_keys: set[tuple[str, str]] = set()
        self.speaker_involved = False
        self.speaker_aliases: list[str] = []
        self.antecedent: _Ref | None = None

    def run(self) -> ExtractionOutput:
        spans = sentence_spans(self.message)
        # A one-sentence message has the message's language: no need to detect it twice.
        single = self.language if len(spans) == 1 else None
        for start, end in spans:
            if len(self.facts) >= self.max_facts:
                break
            sentence, greeted = _without_greeting(_without_openers(self.message[start:end]))
            remember = _REMEMBER.match(sentence)
            if remember is not None:
                sentence = sentence[remember.end() :]
                sentence = sentence[:1].upper() + sentence[1:]
            elif _REQUEST.match(sentence):
                continue
            if not sentence or is_question(sentence) or is_small_talk(sentence):
                continue
            introduction = _introduction(sentence, greeted, self.registry)
            if introduction is not None:
                name, sentence, language = introduction
                self._introduce(name, language)
                if not sentence:
                    continue
            self._sentence(sentence, None, 0, single)
        return self._output()

    def _introduce(self, name: str, language: Language) -> None:
        """The speaker said their name: an alias of the speaker and one name fact, unless it is their own name.

        "Hi, I'm Sam." said by Sam adds nothing ("Sam is Sam." is no fact). Said by "user", it makes
        "Sam" an alias of the speaker and states it once, in one wording whatever the introduction's,
        so saying it again confirms the fact instead of adding another.
        """
        self.speaker_involved = True
        speaker = self.registry.speaker
        if self.registry.resolve(name).is_speaker:
            return
        self.registry.add_alias(name, speaker)
        if name not in self.speaker_aliases:
            self.speaker_aliases.append(name)
        text = f"{speaker.name}'s name is {name}." if language == "en" else f"O nome de {speaker.name} é {name}."
        text = text[:1].upper() + text[1:]
        identity = (speaker.key, alias_key(text))
        if identity in self.fact_keys or len(self.facts) >= self.max_facts:
            return
        self.fact_keys.add(identity)
        self.facts.append(
            ExtractedFact(
                subject=speaker.name,
                text=text,
                attribute_key="personal.name",
                importance_category="biographical_milestone",
                confidence_level="explicit_statement",
            )
        )

    def _sentence(self, text: str, forced: _Ref | None, depth: int, language: Language | None = None) -> None:
        if language is None:
            language = detect_language(text, default=self.language, pt_words=_PT_VERB_WORDS)
        s = _prepare(text, language, self.registry)
        pronoun: tuple[int, int] | None = None
        if forced is None:
            subject, pronoun = _find_subject(s, self.registry, self.antecedent)
        else:
            subject = forced
        hits = _hits(s, subject, self.registry, self.antecedent, _PATTERNS_BY_LANGUAGE[language])
        if depth < _MAX_CLAUSE_DEPTH:
            clauses = _split_clauses(s, subject, hits)
            if clauses is not None:
                for clause in clauses:
                    self._sentence(clause, subject, depth + 1, language)
                return
        links = _kin_links(s, subject, self.registry, self.antecedent)
        text_out, touched = self._rewrite(s, subject, pronoun)
        if word_count(text_out) < _MIN_FACT_WORDS and not hits and not links:
            return
        if _is_tautology(text_out, subject):
            return  # "Sam is Sam.": a fact whose subject and object are one entity says nothing
        # "yesterday" -> "yesterday (7 May 2023)": the fact must say when without its message.
        text_out = resolve_relative_dates(text_out, self.day, language)
        self._collect(s, hits, links)
        retraction = RETRACTION.search(" ".join(s.folded)) is not None
        key, milestone = _attribute_key(subject, hits, links, retraction=retraction)
        fact = ExtractedFact(
            subject=subject.name,
            text=text_out,
            attribute_key=key,
            importance_category=_category(text, key, milestone, subject, touched),
            confidence_level=_confidence(text),
        )
        self.speaker_involved |= touched or subject.is_speaker
        identity = (subject.key, alias_key(text_out))
        if identity not in self.fact_keys and len(self.facts) < self.max_facts:
            self.fact_keys.add(identity)
            self.facts.append(fact)
        info = self.registry.entities.get(subject.key)
        if not subject.is_speaker and info is not None and info.type == "person":
            self.antecedent = subject  # "She" in the next sentence most likely means this person

    def _rewrite(self, s: _Sentence, subject: _Ref, pronoun: tuple[int, int] | None) -> tuple[str, bool]:
        speaker = self.speaker_name
        replacement = subject.name
        if s.language == "en":
            if subject.is_speaker and pronoun is None and _bare_verb_start(s):
                prefixed = _prepare("I " + _lower_first(s.text), "en", self.registry)
                text, _ = _rewrite_en(prefixed, speaker, None, replacement)
                return _tidy(text), True
            text, touched = _rewrite_en(s, speaker, pronoun, replacement)
        else:
            text, touched = _rewrite_pt(s, speaker, pronoun, replacement)
        return _tidy(text), touched

    def _collect(self, s: _Sentence, hits: list[_Hit], links: list[_KinLink]) -> None:
        """Type the mentions from pattern and kinship evidence, then record entities and relations."""
        for hit in hits:
            target = hit.target
            if target is None:
                continue
            pattern = hit.pattern
            if pattern.target_type and target.rank < _RANK_PATTERN:
                target.rank, target.type = _RANK_PATTERN, pattern.target_type
            if hit.source is None or hit.future or pattern.relation is None:
                continue
            relation = pattern.relation
            if hit.negated:
                if pattern.kind != "likes":
                    continue
                relation = "dislikes"
            self._relate(hit.source, target.ref, relation)
        for link in links:
            named = link.named
            if named is None:
                continue
            if named.rank < _RANK_KIN:
                named.rank, named.type = _RANK_KIN, link.spec.named_type
            if link.possessor is None:
                continue
            if link.ex and link.spec.kind != "partner":
                continue
            relation = "ex_partner_of" if link.ex else link.spec.relation
            source, target_ref = (
                (named.ref, link.possessor) if link.spec.named_is_source else (link.possessor, named.ref)
            )
            self._relate(source, target_ref, relation)
        for mention in s.mentions:
            self.registry.note(mention)
            self.speaker_involved |= mention.ref.is_speaker

    def _relate(self, source: _Ref, target: _Ref, relation: str) -> None:
        if source.key == target.key:
            return
        self.speaker_involved |= source.is_speaker or target.is_speaker
        key = (source.key, target.key, relation)
        if key not in self.relations:
            self.relations[key] = ExtractedRelation(source=source.name, target=target.name, type=relation)

    def _output(self) -> ExtractionOutput:
        entities: list[ExtractedEntity] = []
        if self.speaker_involved:
            entities.append(ExtractedEntity(name=self.speaker_name, type="person", aliases=list(self.speaker_aliases)))
        for info in sorted(self.registry.entities.values(), key=lambda item: item.order):
            entities.append(ExtractedEntity(name=info.name, type=info.type, aliases=list(info.aliases)))
        return ExtractionOutput(entities=entities, facts=self.facts, relations=list(self.relations.values()))


def _bare_verb_start(s: _Sentence) -> bool:
    """An English sentence without a subject that opens with a verb ("Went hiking", "Love this")."""
    if not s.tokens or s.tokens[0].start() in s.by_start:
        return False
    first = s.folded[0]
    return first in _EN_BARE_START or (len(first) > 4 and first.endswith("ed") and first.isalpha())


def _split_clauses(s: _Sentence, subject: _Ref, hits: list[_Hit]) -> list[str] | None:
    """Split "X and Y" when X and Y fill different single-valued slots of the subject."""
    firsts: dict[str, _Hit] = {}
    for hit in hits:
        key = hit.pattern.attribute_key
        mine = hit.source is not None and hit.source.key == subject.key
        if key and is_single_valued(key) and not hit.future and mine:
            firsts.setdefault(key, hit)
    if len(firsts) < 2:
        return None
    first, second = sorted(firsts.values(), key=lambda hit: hit.start)[:2]
    region = first.target.end if first.target is not None else first.end
    if region >= second.start:
        return None
    breaks = list(_CLAUSE_BREAK.finditer(s.text, region, second.start))
    if not breaks:
        return None
    cut = breaks[0]
    left = s.text[: cut.start()].rstrip(" ,;")
    right = s.text[cut.end() :].strip()
    if word_count(left) < 2 or word_count(right) < 2:
        return None
    if s.text[-1:] in ".!" and left[-1:] not in ".!":
        left += s.text[-1]
    if not _starts_with_subject(right):
        if not subject.is_speaker:
            right = subject.name + " " + _lower_first(right)
        elif s.language == "en":
            right = "I " + _lower_first(right)
    return [left, right]


def _starts_with_subject(clause: str) -> bool:
    first = WORD_RE.match(clause)
    if first is None:
        return False
    word = _f(first.group())
    if word in _SPEAKER_SUBJECTS or word in _THIRD_PERSON or word in _POSSESSIVES_1P:
        return True
    if _first_person_pt(first.group()):
        return False
    return first.group()[:1].isupper() and word not in INITIAL_STOP


def _attribute_key(
    subject: _Ref, hits: list[_Hit], links: list[_KinLink], *, retraction: bool = False
) -> tuple[str | None, bool]:
    """The fact's attribute key: single-valued predicates first, then other predicates, then kinship.

    A negated like is a dislike ("doesn't like jazz"), unless it retracts one ("no longer likes
    jazz"): that keeps the like's slot, as "no longer lives in Paris" keeps the residence's, so
    reconciliation replaces the like it ends.
    """
    ranked: list[tuple[int, int, str]] = []
    milestone = False
    for order, hit in enumerate(hits):
        key = hit.pattern.attribute_key
        if hit.source is None or hit.source.key != subject.key or key is None:
            continue
        milestone |= hit.pattern.milestone and not hit.future
        if hit.future:
            ranked.append((1, order, "goal.plan"))
            continue
        if hit.negated and hit.pattern.kind == "likes" and not retraction:
            key = "preference.dislike"
        ranked.append((0 if is_single_valued(key) else 1, order, key))
    for order, link in enumerate(links, start=len(hits)):
        if link.ex:
            continue
        spec = link.spec
        # A single-valued slot (the partner) is filled only by a sentence that states it, so that
        # naming one's girlfriend in passing does not supersede the fact that says who she is.
        if link.possessor is not None and link.possessor.key == subject.key and spec.attribute_key:
            single = is_single_valued(spec.attribute_key)
            if not single or (link.named is not None and link.predicative):
                ranked.append((2 if single else 3, order, spec.attribute_key))
        elif link.named is not None and link.named.ref.key == subject.key and spec.inverse_key:
            single = is_single_valued(spec.inverse_key)
            if not single or link.predicative:
                ranked.append((2 if single else 3, order, spec.inverse_key))
    if not ranked:
        return None, milestone
    return min(ranked)[2], milestone


def _category(text: str, key: str | None, milestone: bool, subject: _Ref, touched: bool) -> ImportanceCategory:
    if milestone or MILESTONE.search(text):
        return "biographical_milestone"
    if key is not None:
        return _KEY_CATEGORY.get(key, "routine_activity")
    if TEMPORAL.search(text):
        return "specific_event"
    if HABITUAL.search(text):
        return "routine_activity"
    if HEDGE.search(text) or SPECULATION.search(text):
        return "conversational"
    if subject.is_speaker and word_count(text) <= _SHORT_REACTION_WORDS and _REACTION.search(text):
        return "conversational"  # "Oh nice, I love that!"
    if touched or not subject.is_speaker:
        return "routine_activity"
    return "conversational"


def _confidence(text: str) -> ConfidenceLevel:
    if SPECULATION.search(text):
        return "speculation"
    if HEDGE.search(text):
        return "weak_inference"
    return "explicit_statement"


def extract(skill_input: ExtractionInput, *, use_known_entities: bool = True) -> ExtractionOutput:
    """Run the offline extraction rules on one message (see the module docstring)."""
    if not skill_input.message.strip():
        return ExtractionOutput()
    return _Extractor(skill_input, use_known_entities).run()


class OfflineExtractionSkill:
    """Rule-based extraction (no LLM, no tokens): ``Skill[ExtractionInput, ExtractionOutput]``.

    One class serves both write-path steps: ``name="extract_informed"`` maps the message's
    known entities (``known_entities``) back to their canonical names; ``name="extract_blind"``
    ignores them, as a blind extraction would. Deterministic: the same input always gives
    the same output.
    """

    def __init__(self, name: str = EXTRACT_INFORMED, *, use_known_entities: bool | None = None) -> None:
        self._name = name
        self._use_known = use_known_entities if use_known_entities is not None else name != EXTRACT_BLIND

    @property
    def name(self) -> str:
        """The skill's stable identifier."""
        return self._name

    def run(self, skill_input: ExtractionInput, /) -> SkillOutcome[ExtractionOutput]:
        """Extract entities, facts and relations with the pattern rules; zero token usage."""
        started = time.perf_counter()
        output = extract(skill_input, use_known_entities=self._use_known)
        return SkillOutcome(output=output, duration_ms=(time.perf_counter() - started) * 1000.0)
