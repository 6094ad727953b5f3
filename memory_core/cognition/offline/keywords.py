"""Content words of a text: what is left once English and Portuguese function words are dropped.

The offline community and consolidation skills compare texts by the words they share; these
rules keep only words that can carry a topic (three letters or more, not a number, not in the
stop list below), folded so that "Corrida" and "corrida" are the same word, and remember how
each word was first written so titles can show it as the text did.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory_core.cognition.offline.text import WORD_RE, fold_word

__all__ = ["STOPWORDS", "Keyword", "content_words"]


def _words(blob: str) -> frozenset[str]:
    return frozenset(fold_word(word) for word in blob.split())


# Function words, auxiliaries, pronouns, very common verbs and time words of both languages:
# the words every message shares and no topic is made of.
STOPWORDS = _words(
    # English
    "the and for are but not you all any can had her was one our out has have him his how its may new now "
    "old see two way who did get got let put say she too use that with this from they will would there their "
    "what about which when make like time just know take into year your some could them than then these "
    "other also back after only over think because most even want give day very been were does being much "
    "more many such those here where while should must might shall again still ever never always often "
    "really today yesterday tomorrow week weeks month months morning night evening afternoon went going gone "
    "come came goes said says told tell feel felt thing things something anything everything nothing lot lots "
    "yes yeah okay well good great nice bad better best last next first before during since until each every "
    "both either neither own same another able mine yours ours theirs myself yourself himself herself "
    "itself ourselves themselves doing done having is am i'm i've i'll it's that's don't didn't can't won't "
    "isn't wasn't aren't weren't has hasn't haven't let's gonna wanna "
    # Portuguese
    "que não nao com uma para pra por mais como mas foi ele ela eles elas isso isto essa esse esta este "
    "estas estes aquele aquela aquilo seu sua seus suas meu minha meus minhas nosso nossa dele dela deles "
    "delas você voce vocês voces vc tem têm tenho temos tinha ter ser sou são sao era eram estar estou está "
    "esta estão estao estava estavam fui foram vai vou vamos vão vao ir ia fazer faz fiz feito fez hoje "
    "ontem amanhã amanha agora aqui ali lá la ainda já ja sempre nunca muito muita muitos muitas pouco "
    "também tambem então entao porque pois quando onde quem qual quais cada todo toda todos todas tudo "
    "nada algo alguém alguem outro outra outros outras mesmo mesma dia dias semana semanas mês mes meses "
    "ano anos manhã manha tarde noite sobre entre depois antes desde até ate sem sob pelo pela pelos pelas "
    "num numa nos nas dos das aos coisa coisas bem bom boa sim acho achei disse diz falou contou sei sabe "
    "quero queria pode posso podia tá tô to ok legal"
)
_MIN_LETTERS = 3


@dataclass(frozen=True, slots=True)
class Keyword:
    """A content word: its folded form (for comparison) and the form the text first used."""

    folded: str
    shown: str


def content_words(text: str) -> list[Keyword]:
    """The content words of ``text`` in order, each once (first occurrence wins)."""
    seen: set[str] = set()
    words: list[Keyword] = []
    for match in WORD_RE.finditer(text):
        shown = match.group().strip("'’-")
        folded = fold_word(shown)
        if len(folded) < _MIN_LETTERS or folded in STOPWORDS or folded in seen or folded.isdigit():
            continue
        seen.add(folded)
        words.append(Keyword(folded=folded, shown=shown))
    return words
