"""Offline emotion tagging: a small English/Portuguese lexicon, not an LLM.

Each lexicon word found votes for its emotion (joy, sadness, anger, fear, surprise,
tiredness); an intensifier right before it ("very", "so", "muito", "super") makes the vote
count more, and a negation right before it ("not happy", "não estou feliz") cancels it, or,
for joy, turns it into sadness. The emotion with the most votes wins. Intensity grows with
the votes and with exclamation marks; energy is high for intense joy, anger and surprise,
low for sadness and tiredness, medium otherwise. No match means ``neutral``, intensity 0.
"""

from __future__ import annotations

import re
import time

from memory_core.cognition.models import EmotionInput, EmotionOutput, Energy
from memory_core.cognition.skill import SkillOutcome
from memory_core.write.naming import fold

__all__ = ["TAG_EMOTION", "OfflineEmotionSkill", "tag_emotion"]

TAG_EMOTION = "tag_emotion"


def _lexicon(**groups: str) -> dict[str, str]:
    return {fold(word): emotion for emotion, blob in groups.items() for word in blob.split()}


_LEXICON = _lexicon(
    joy="happy happier happiest glad joy joyful excited exciting thrilled delighted awesome amazing wonderful "
    "fantastic yay proud grateful thankful blessed cheerful ecstatic love loved loving lovely great "
    "feliz felizes alegre alegria animado animada animados animadas empolgado empolgada empolgados contente "
    "adoro adorei amei incrível incrivel maravilhoso maravilhosa ótimo ótima otimo otima orgulhoso orgulhosa "
    "grato grata agradecido agradecida radiante eba oba uhu uhul aliviado aliviada relieved",
    sadness="sad sadder unhappy depressed depressing upset miserable heartbroken lonely cry crying cried "
    "grief sorrow disappointed disappointing gloomy hopeless hurt triste tristes tristeza chateado chateada "
    "deprimido deprimida saudade saudades solitário solitária chorando chorei chorar decepcionado "
    "decepcionada desanimado desanimada magoado magoada arrasado arrasada luto",
    anger="angry mad furious annoyed annoying irritated irritating pissed hate hated frustrated frustrating "
    "outraged rage raiva irritado irritada irritante bravo brava furioso furiosa ódio odio odeio frustrado "
    "frustrada revoltado revoltada indignado indignada puto puta",
    fear="afraid scared fear worried worry worrying anxious anxiety nervous terrified panic stressed stress "
    "medo preocupado preocupada preocupação preocupacao ansioso ansiosa ansiedade nervoso nervosa apavorado "
    "apavorada assustado assustada pânico panico tenso tensa estressado estressada receio",
    surprise="surprised surprising surprise shocked shocking wow unexpected astonished speechless "
    "surpreso surpresa surpresos chocado chocada uau caramba inesperado inesperada",
    tiredness="tired exhausted exhausting sleepy drained weary cansado cansada cansados cansaço cansaco "
    "exausto exausta esgotado esgotada sonolento sonolenta",
)
_PHRASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(?:fed\s+up|de\s+saco\s+cheio|puto\s+da\s+vida)\b"), "anger"),
    (re.compile(r"\b(?:burn(?:ed|t)\s+out|worn\s+out|morto\s+de\s+cansaco|sem\s+energia)\b"), "tiredness"),
    (re.compile(r"\b(?:over\s+the\s+moon|on\s+cloud\s+nine|nas\s+nuvens)\b"), "joy"),
)
_EMOTICONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"[:;=]-?[)D]|😀|😃|😄|😁|😊|🙂|🥳|😍|❤️|🎉"), "joy"),
    (re.compile(r":-?\(|😢|😭|😞|😔|☹️|🙁|💔"), "sadness"),
    (re.compile(r"😠|😡|🤬"), "anger"),
    (re.compile(r"😨|😰|😱"), "fear"),
    (re.compile(r"😮|😲|🤯"), "surprise"),
    (re.compile(r"😴|🥱|😪"), "tiredness"),
)


def _folded(blob: str) -> frozenset[str]:
    return frozenset(fold(word) for word in blob.split())


_INTENSIFIERS = _folded(
    "very so really super extremely too incredibly totally truly muito muita tão tao mega hiper "
    "extremamente bastante demais realmente bem"
)
_NEGATIONS = _folded("not never no don't isn't aren't wasn't não nao nem nunca")
_WORD = re.compile(r"[a-z0-9']+")
# Ties go to the first emotion here: a message that is both sad and tired is sad.
_PRIORITY = ("anger", "fear", "sadness", "surprise", "tiredness", "joy")
_HIGH_ENERGY = frozenset({"joy", "anger", "surprise"})
_LOW_ENERGY = frozenset({"sadness", "tiredness"})
_BASE = 0.35
_PER_VOTE = 0.2
_PER_EXCLAMATION = 0.1
_MAX_EXCLAMATIONS = 3
_INTENSIFIER_BONUS = 0.5
_HIGH_ENERGY_INTENSITY = 0.6
_LOOKBACK = 2


def tag_emotion(text: str) -> EmotionOutput:
    """Primary emotion, intensity in [0, 1] and energy of ``text`` by lexicon (see the module docstring)."""
    folded = fold(text)
    words = _WORD.findall(folded)
    votes: dict[str, float] = {}
    for index, word in enumerate(words):
        emotion = _LEXICON.get(word)
        if emotion is None:
            continue
        window = words[max(0, index - _LOOKBACK) : index]
        if any(previous in _NEGATIONS for previous in window):
            if emotion != "joy":
                continue
            emotion = "sadness"
        weight = 1.0 + (_INTENSIFIER_BONUS if any(previous in _INTENSIFIERS for previous in window) else 0.0)
        votes[emotion] = votes.get(emotion, 0.0) + weight
    for pattern, emotion in _PHRASES:
        hits = len(pattern.findall(folded))
        if hits:
            votes[emotion] = votes.get(emotion, 0.0) + hits
    for pattern, emotion in _EMOTICONS:
        hits = len(pattern.findall(text))
        if hits:
            votes[emotion] = votes.get(emotion, 0.0) + hits
    if not votes:
        return EmotionOutput(emotion="neutral", intensity=0.0, energy="medium")
    emotion = min(votes, key=lambda name: (-votes[name], _PRIORITY.index(name)))
    exclamations = min(text.count("!"), _MAX_EXCLAMATIONS)
    intensity = min(1.0, _BASE + _PER_VOTE * votes[emotion] + _PER_EXCLAMATION * exclamations)
    energy: Energy = "medium"
    if emotion in _LOW_ENERGY:
        energy = "low"
    elif emotion in _HIGH_ENERGY and (intensity >= _HIGH_ENERGY_INTENSITY or exclamations):
        energy = "high"
    return EmotionOutput(emotion=emotion, intensity=round(intensity, 3), energy=energy)


class OfflineEmotionSkill:
    """Lexicon-based emotion tagging (no LLM): ``Skill[EmotionInput, EmotionOutput]``."""

    @property
    def name(self) -> str:
        """The skill's stable identifier."""
        return TAG_EMOTION

    def run(self, skill_input: EmotionInput, /) -> SkillOutcome[EmotionOutput]:
        """Tag the text's emotion from the lexicon; zero token usage."""
        started = time.perf_counter()
        output = tag_emotion(skill_input.text)
        return SkillOutcome(output=output, duration_ms=(time.perf_counter() - started) * 1000.0)
