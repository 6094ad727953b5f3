"""Offline procedural memory: directive detection, the contradiction judge and the block, as rules.

These are the rule twins of :mod:`memory_core.cognition.llm.directives`; they understand far
less than a model and say so by recognising only a documented set of phrasings.

Detection (per sentence, English and Portuguese), every directive written in English (W20):

- answer language: "always answer in Portuguese", "responda em português", "fale comigo em
  inglês", "I want you to reply in Spanish" -> ``Always answer in Portuguese.``;
- forms of address: "don't call me sir", "não me chame de senhor" -> ``Do not call the user
  "sir".``; "call me Rafa", "me chame de Rafa" -> ``Call the user "Rafa".``;
- length: "be brief", "seja mais conciso", "keep it short" -> ``Keep answers brief.``;
- emojis: "no emojis", "não use emojis" -> ``Do not use emojis.``;
- English imperatives that start with always / never / don't / do not / stop / from now on
  followed by a verb of how an assistant talks or acts (use, answer, call, mention, ask, add...):
  the sentence itself, first person turned into "the user".

A generic Portuguese imperative outside those templates is not detected: the rules cannot
translate it, and a directive must be English.

Contradiction (``judge_directive_contradiction``): two directives contradict when one forbids
what the other asks (a negation on one side only, the rest mostly the same words), or when they
say the same instruction with a different value (a common start of at least two words, then
different endings: "answer in Portuguese" / "answer in English").

Block (``compose_directive_block``): the persona, then the directives as a bullet list,
strongest first, cut at the token budget.
"""

from __future__ import annotations

import re
import time

from memory_core.cognition.directive_models import (
    ContradictionInput,
    ContradictionOutput,
    DirectiveBlockInput,
    DirectiveBlockOutput,
    DirectiveDetectionInput,
    DirectiveDetectionOutput,
    ExtractedDirective,
)
from memory_core.cognition.skill import SkillOutcome

__all__ = [
    "COMPOSE_DIRECTIVE_BLOCK",
    "DETECT_DIRECTIVES",
    "JUDGE_DIRECTIVE_CONTRADICTION",
    "OfflineContradictionSkill",
    "OfflineDirectiveBlockSkill",
    "OfflineDirectiveDetectionSkill",
    "compose_block",
    "detect_directives",
    "directive_key",
    "judge_contradiction",
]

DETECT_DIRECTIVES = "detect_directives"
JUDGE_DIRECTIVE_CONTRADICTION = "judge_directive_contradiction"
COMPOSE_DIRECTIVE_BLOCK = "compose_directive_block"

CHARS_PER_TOKEN = 4
BLOCK_HEADER = "Follow these instructions learned from the user:"

_LANGUAGES = {
    "portuguese": "Portuguese",
    "português": "Portuguese",
    "portugues": "Portuguese",
    "english": "English",
    "inglês": "English",
    "ingles": "English",
    "spanish": "Spanish",
    "espanhol": "Spanish",
    "español": "Spanish",
    "espanol": "Spanish",
    "french": "French",
    "francês": "French",
    "frances": "French",
    "german": "German",
    "alemão": "German",
    "alemao": "German",
    "italian": "Italian",
    "italiano": "Italian",
}

_EXPLICIT = re.compile(
    r"\b(always|never|from now on|sempre|nunca|a partir de agora|de agora em diante|daqui pra frente)\b", re.I
)
# What may open a request before its verb: politeness, "always", "from now on", "I want you to".
_LEAD = (
    r"^(?:(?:please|por favor|always|sempre|only|só|so|from now on|a partir de agora|de agora em diante|"
    r"daqui pra frente|i want you to|i'd like you to|i would like you to|i prefer that you|can you|could you|"
    r"quero que (?:você|voce)|prefiro que (?:você|voce)|gostaria que (?:você|voce)|pode|you should|"
    r"(?:você|voce) deve)[,\s]+)*"
)
_LANGUAGE = re.compile(
    _LEAD + r"(?:answer|reply|respond|speak|talk|write|responda|responde|respondam|fale|fala|escreva|escreve|"
    r"converse|conversa)(?:\s+(?:to me|with me|comigo|para mim|pra mim))?\s+(?:only\s+|always\s+|sempre\s+)?"
    r"(?:in|em|somente em|apenas em|só em|so em)\s+(?P<lang>[^\W\d_]+)",
    re.I,
)
_DONT_CALL = re.compile(
    r"^(?:please[,\s]+|por favor[,\s]+)?(?:don'?t|do not|never|n[aã]o|nunca)\s+(?:me\s+chame|me\s+chama|call\s+me|"
    r"address\s+me\s+as)(?:\s+(?:de|as))?\s+(?P<name>.+)$",
    re.I,
)
_CALL = re.compile(
    r"^(?:please[,\s]+|por favor[,\s]+)?(?:call me|you can call me|me chame de|me chama de|pode me chamar de)\s+"
    r"(?P<name>.+)$",
    re.I,
)
_BRIEF = re.compile(
    _LEAD + r"(?:(?:be|seja|keep (?:it|your answers|answers)|mantenha as respostas)\s+(?:more\s+|mais\s+)?"
    r"(?:brief|concise|short|succinct|breve|breves|conciso|concisa|concisos|curto|curta|curtas|direto|direta)|"
    r"(?:answer|respond|responda)\s+(?:more\s+|mais\s+)?(?:briefly|concisely|curto|brevemente))\b",
    re.I,
)
_NO_EMOJI = re.compile(
    r"^(?:please[,\s]+|por favor[,\s]+)?(?:no emojis?|sem emojis?|(?:don'?t|do not|never|stop|n[aã]o|nunca|pare de)\s+"
    r"(?:use|using|usar|use|usa|mande|send|sending)\s+emojis?)\b",
    re.I,
)
# Verbs of how an assistant talks or acts: an "always/never/don't" sentence built on one of
# them is an instruction to the assistant ("never ask me about work"), not a habit of the user.
_ASSISTANT_VERBS = (
    "use|answer|reply|respond|call|address|mention|ask|give|add|include|start|end|begin|finish|suggest|recommend|"
    "talk|speak|write|say|send|remind|tell|show|list|explain|summarize|summarise|format|sign|greet|apologize|"
    "apologise|repeat|bring up|contact|share|translate|correct"
)
_GENERIC = re.compile(
    r"^(?:please[,\s]+)?(?P<lead>always|never|don'?t|do not|stop|from now on,?)\s+(?:(?:always|ever|again)\s+)?"
    rf"(?P<verb>(?:{_ASSISTANT_VERBS})(?:ing)?|using)\b(?P<rest>.*)$",
    re.I,
)
_SENTENCES = re.compile(r"[^.!?;\n]+")
_FIRST_PERSON = (
    (re.compile(r"\bI'm\b", re.I), "the user is"),
    (re.compile(r"\bmyself\b", re.I), "the user"),
    (re.compile(r"\bmine\b", re.I), "the user's"),
    (re.compile(r"\bmy\b", re.I), "the user's"),
    (re.compile(r"\bme\b", re.I), "the user"),
    (re.compile(r"\bI\b"), "the user"),
)
_ASSISTANT_SPEAKERS = frozenset({"assistant", "ai", "bot", "system", "agent"})


def _third_person(text: str) -> str:
    for pattern, replacement in _FIRST_PERSON:
        text = pattern.sub(replacement, text)
    return text


def _sentence(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip(" ,")
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else f"{text}."


def _name(raw: str) -> str:
    # "senhor, por favor" -> "senhor"; quotes the model or user put around it are dropped.
    cut = re.split(r",|\s+(?:please|por favor|anymore|mais)\b", raw.strip(), maxsplit=1, flags=re.I)[0]
    return cut.strip(" \"'“”‘’")


def _detect_sentence(sentence: str) -> ExtractedDirective | None:
    text = sentence.strip()
    confidence = 0.9 if _EXPLICIT.search(text) else 0.8
    found = _LANGUAGE.search(text)
    if found and found.group("lang").lower() in _LANGUAGES:
        return ExtractedDirective(text=f"Always answer in {_LANGUAGES[found.group('lang').lower()]}.", confidence=0.9)
    found = _DONT_CALL.match(text)
    if found and _name(found.group("name")):
        return ExtractedDirective(text=f'Do not call the user "{_name(found.group("name"))}".', confidence=0.9)
    found = _CALL.match(text)
    if found and _name(found.group("name")):
        return ExtractedDirective(text=f'Call the user "{_name(found.group("name"))}".', confidence=confidence)
    if _NO_EMOJI.match(text):
        return ExtractedDirective(text="Do not use emojis.", confidence=0.9)
    if _BRIEF.search(text):
        return ExtractedDirective(text="Keep answers brief.", confidence=confidence)
    found = _GENERIC.match(text)
    if found:
        lead = found.group("lead").lower().rstrip(",")
        opening = {"don't": "Do not", "dont": "Do not", "do not": "Do not", "stop": "Do not"}.get(lead)
        verb = found.group("verb")
        if verb.lower() == "using":
            verb = "use"
        elif verb.lower().endswith("ing"):
            verb = verb[:-3]
        if opening is None:
            opening = "From now on," if lead == "from now on" else lead.capitalize()
        return ExtractedDirective(
            text=_sentence(f"{opening} {verb.lower()}{_third_person(found.group('rest'))}"), confidence=confidence
        )
    return None


def detect_directives(message: str, speaker_name: str = "") -> list[ExtractedDirective]:
    """The directives ``message`` gives the assistant, by the module's rules (none from the assistant itself)."""
    if speaker_name.strip().lower() in _ASSISTANT_SPEAKERS:
        return []
    found: dict[str, ExtractedDirective] = {}
    for match in _SENTENCES.finditer(message):
        directive = _detect_sentence(match.group(0))
        if directive is not None:
            found.setdefault(directive_key(directive.text), directive)
    return list(found.values())


_WORDS = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)
_NEGATIONS = frozenset({"not", "don't", "dont", "never", "no", "avoid", "stop", "without"})
_FILLER = frozenset({"always", "please", "do", "the", "a", "an", "to", "from", "now", "on"})


def directive_key(text: str) -> str:
    """The directive's comparison key: lower-case words, punctuation dropped (equal keys = the same directive)."""
    return " ".join(word.lower() for word in _WORDS.findall(text))


def _shape(text: str) -> tuple[bool, list[str]]:
    words = directive_key(text).split()
    negative = any(word in _NEGATIONS for word in words)
    return negative, [word for word in words if word not in _NEGATIONS and word not in _FILLER]


def judge_contradiction(new_directive: str, existing_directive: str) -> ContradictionOutput:
    """Whether the two directives cannot both be followed, by the module's two rules."""
    new_negative, new_words = _shape(new_directive)
    old_negative, old_words = _shape(existing_directive)
    if not new_words or not old_words:
        return ContradictionOutput(contradicts=False, reason="nothing to compare")
    if new_negative != old_negative:
        shared = set(new_words) & set(old_words)
        overlap = len(shared) / len(set(new_words) | set(old_words))
        if overlap >= 0.6:
            return ContradictionOutput(contradicts=True, reason="one directive forbids what the other asks")
        return ContradictionOutput(contradicts=False, reason="different subjects")
    common = 0
    for new_word, old_word in zip(new_words, old_words, strict=False):
        if new_word != old_word:
            break
        common += 1
    new_rest, old_rest = new_words[common:], old_words[common:]
    if common >= 2 and new_rest and old_rest and len(new_rest) <= 3 and len(old_rest) <= 3:
        return ContradictionOutput(contradicts=True, reason="the same instruction with a different value")
    return ContradictionOutput(contradicts=False, reason="compatible")


def compose_block(persona: str, directives: list[str], max_tokens: int) -> str:
    """The persona, then the directives as bullets in the given order, within ``max_tokens`` (4 chars a token).

    When the header leaves no room for a single directive, the bullets go without it: a tight
    budget keeps instructions rather than a title.
    """
    budget = max(1, max_tokens) * CHARS_PER_TOKEN
    persona = persona.strip()[:budget]
    lines = [f"- {text.strip()}" for text in directives if text.strip()]

    def fill(opening: list[str]) -> tuple[str, int]:
        text, added = "\n".join(opening), 0
        for line in lines:
            candidate = f"{text}\n{line}" if text else line
            if len(candidate) > budget:
                break
            text, added = candidate, added + 1
        return text, added

    header = [persona, "", BLOCK_HEADER] if persona else [BLOCK_HEADER]
    for opening in (header, [persona] if persona else []):
        text, added = fill(opening)
        if added:
            return text
    return persona


class OfflineDirectiveDetectionSkill:
    """Directive detection by the module's rules; no tokens."""

    @property
    def name(self) -> str:
        """``detect_directives``."""
        return DETECT_DIRECTIVES

    def run(self, skill_input: DirectiveDetectionInput, /) -> SkillOutcome[DirectiveDetectionOutput]:
        """The directives the message gives."""
        started = time.perf_counter()
        output = DirectiveDetectionOutput(directives=detect_directives(skill_input.message, skill_input.speaker_name))
        return SkillOutcome(output=output, duration_ms=(time.perf_counter() - started) * 1000.0)


class OfflineContradictionSkill:
    """The contradiction judge by the module's rules; no tokens."""

    @property
    def name(self) -> str:
        """``judge_directive_contradiction``."""
        return JUDGE_DIRECTIVE_CONTRADICTION

    def run(self, skill_input: ContradictionInput, /) -> SkillOutcome[ContradictionOutput]:
        """Whether the new directive contradicts the existing one."""
        started = time.perf_counter()
        output = judge_contradiction(skill_input.new_directive, skill_input.existing_directive)
        return SkillOutcome(output=output, duration_ms=(time.perf_counter() - started) * 1000.0)


class OfflineDirectiveBlockSkill:
    """The directive block as persona + bullet list; no tokens."""

    @property
    def name(self) -> str:
        """``compose_directive_block``."""
        return COMPOSE_DIRECTIVE_BLOCK

    def run(self, skill_input: DirectiveBlockInput, /) -> SkillOutcome[DirectiveBlockOutput]:
        """The block within the input's token budget."""
        started = time.perf_counter()
        text = compose_block(skill_input.persona, skill_input.directives, skill_input.max_tokens)
        return SkillOutcome(
            output=DirectiveBlockOutput(text=text), duration_ms=(time.perf_counter() - started) * 1000.0
        )
