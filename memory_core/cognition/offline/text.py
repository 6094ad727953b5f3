"""Text primitives of the offline skills: sentences, small talk, language and capitalised names.

These are rules, not a language model: they split on punctuation and newlines, recognise
greetings and thanks from a fixed English and Portuguese vocabulary, and treat runs of
capitalised words as names. Every function is pure and cheap (precompiled regexes, set
look-ups, one pass over the text) because extraction runs on every message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from memory_core.write.naming import fold, normalize_alias

__all__ = [
    "ALWAYS_STOP",
    "INITIAL_STOP",
    "WORD_RE",
    "Language",
    "NameSpan",
    "alias_key",
    "detect_language",
    "find_names",
    "fold_aligned",
    "fold_word",
    "is_question",
    "is_small_talk",
    "sentence_spans",
    "split_sentences",
    "word_count",
]

Language = Literal["en", "pt"]

# A word: letters/digits joined by apostrophes or hyphens ("I'm", "Jean-Luc", "contratou-me"),
# or dotted initials ("S.A.", "e.g.") so company suffixes survive as one token.
WORD_RE = re.compile(r"(?:[^\W\d_]\.){2,}|[^\W_]+(?:['’\-][^\W_]+)*")


# Words and names repeat across messages; caching their folded forms keeps extraction cheap.
@lru_cache(maxsize=65536)
def fold_word(word: str) -> str:
    """:func:`~memory_core.write.naming.fold` of a word or short name, cached."""
    return fold(word)


@lru_cache(maxsize=16384)
def alias_key(name: str) -> str:
    """:func:`~memory_core.write.naming.normalize_alias` of a name, cached."""
    return normalize_alias(name)


def _words(blob: str) -> frozenset[str]:
    """A folded word set from a whitespace-separated blob (keeps the tables below readable)."""
    return frozenset(fold(word) for word in blob.split())


# --- sentence splitting ----------------------------------------------------------------

# Candidate boundaries: a newline, or a run of terminal punctuation (with closing quotes or
# brackets) followed by whitespace or the end. "3.5" and "e-mail.com" never match.
_BOUNDARY = re.compile(r"\n|[.!?…]+[\"'”’)\]]*(?=\s|$)")
_BULLET = re.compile(r"[ \t]*(?:[-*+•·▪◦►>]|\d{1,3}[.)])[ \t]+")

# Words that end with a dot without ending a sentence. Company suffixes (Inc., Ltda.) are not
# here on purpose: they usually do end the sentence they are in.
_ABBREVIATIONS = _words(
    "dr dra drs dras sr sra srs sras srta mr mrs ms mx prof profa st jr sen gen rev vs cia av pag "
    "tel obs ex aprox approx fig nº vol cap ed eng arq adv"
)


def _word_before(text: str, end: int) -> str:
    """The run of letters/digits that ends at ``end`` (scanning back; cheap for short words)."""
    start = end
    while start > 0 and text[start - 1].isalnum():
        start -= 1
    return text[start:end]


def _is_false_boundary(text: str, match: re.Match[str]) -> bool:
    """True for the dot of an abbreviation ("Dr."), an initial ("J."), or a list number ("1.")."""
    if match.group() != ".":
        return False
    dot = match.start()
    word = _word_before(text, dot)
    if not word:
        return False
    if fold_word(word) in _ABBREVIATIONS:
        return True
    if len(word) == 1 and word.isalpha() and word.isupper():
        return True  # an initial: "J. R. R. Tolkien", "S.A."
    if word.isdigit():
        before = dot - len(word)
        line_start = text.rfind("\n", 0, before) + 1
        return not text[line_start:before].strip()  # "1. Moro em..." at the start of a line
    return False


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every sentence in ``text``: trimmed, bullets excluded, empty ones dropped.

    Boundaries are newlines and ``. ! ? …`` followed by whitespace; abbreviations such as
    "Dr." / "Sr.", initials and decimals ("3.5") do not split.
    """
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        if _is_false_boundary(text, match):
            continue
        end = match.start() if match.group() == "\n" else match.end()
        _append_span(text, start, end, spans)
        start = match.end()
    _append_span(text, start, len(text), spans)
    return spans


def _append_span(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> None:
    while start < end and text[start].isspace():
        start += 1
    bullet = _BULLET.match(text, start, end)
    if bullet is not None:
        start = bullet.end()
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        spans.append((start, end))


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (see :func:`sentence_spans`)."""
    return [text[start:end] for start, end in sentence_spans(text)]


def word_count(text: str) -> int:
    """Number of words (see :data:`WORD_RE`)."""
    return sum(1 for _ in WORD_RE.finditer(text))


# --- small talk and questions ----------------------------------------------------------

_SMALL_TALK_WORDS = _words(
    # English greetings, thanks, acknowledgements, farewells, reactions
    "hi hello hey heya hiya yo howdy greetings thanks thank thx ty tks cheers ok okay okey k kk cool nice "
    "great awesome sure yes yeah yep yup ya no nope nah lol lmao rofl lel good morning afternoon evening "
    "night day bye goodbye see you later cya gn gm how are r u doing whats what's up sup alright fine "
    "gotcha got it np welcome please sorry oh ah uh um hmm wow right indeed exactly agreed true totally "
    "much so very a lot well and too bro dude man mate sounds perfect glad hear that's thats is it "
    "appreciate appreciated all the best take care have nice one you're youre your doing going there "
    "i'm im i’m "
    # English replies that acknowledge without telling anything ("Love that! Tell me more.", "Good
    # question, let me check.", "That sounds tough. Hang in there!", "Happy to help!")
    "love loved that this it's tell me more question let check think about sound tough hang in happy "
    "help anything else on mind congratulations congrats news funny interesting wonderful amazing "
    "fantastic lovely know keep i'll i’ll to for "
    # reactions to a plan ("That sounds like a great plan!", "So exciting!")
    "like plan idea fun exciting really "
    # Portuguese
    "oi ola olá opa eai eaí e aí ai tudo bem beleza blz tranquilo tranquila suave obrigado obrigada obg "
    "brigado brigada valeu vlw bom boa dia tarde noite até ate logo mais tchau falou flw sim não nao "
    "claro certo pois então entao legal show top massa ótimo otimo ótima otima perfeito perfeita "
    "como vai você voce vc está esta tá ta td tb também tambem muito mto de nada por favor desculpa "
    "desculpe foi mal entendi hum nossa uau isso mesmo verdade com certeza bora vamos né ne tudo "
    "joia jóia fechado combinado pode deixa demais tu prazer o a amanhã amanha breve estou tô to tá "
    # Portuguese replies that acknowledge without telling anything ("Boa pergunta, deixa eu ver.",
    # "Entendi, vou lembrar disso.", "Parabéns, que notícia ótima!", "Fico feliz em ajudar!")
    "pergunta eu ver vou lembrar disso fico feliz em ajudar alguma coisa parabéns parabens que notícia "
    "noticia pensar saber adorei amei poxa sinto força forca fase hein interessante ser "
    # reactions to a plan ("Parece um ótimo plano!", "Que ideia ótima!")
    "parece um uma plano ideia"
)
_SMALL_TALK_PHRASES = frozenset(
    " ".join(fold(phrase).split())
    for phrase in (
        "how are you",
        "how are you doing",
        "how's it going",
        "what's up",
        "tudo bem",
        "tudo bom",
        "e aí",
        "como vai",
        "como você está",
        "bom dia",
        "boa tarde",
        "boa noite",
        "thank you",
        "thank you so much",
        "good morning",
        "good night",
    )
)
_LAUGHTER = re.compile(r"^(?:(?:ha|he|hi|hu|ah|eh|rs|ks|k)+h?|lo+l|kk+|rs+|hue+)$")
_SMALL_TALK_MAX_WORDS = 8
_QUESTION_END = re.compile(r"\?[\s!?\"'”’)\]]*$")


def is_question(sentence: str) -> bool:
    """True when the sentence ends with a question mark (possibly followed by ``!`` or quotes)."""
    return _QUESTION_END.search(sentence) is not None


def is_small_talk(sentence: str) -> bool:
    """True for greetings, thanks, acknowledgements, laughter and emoji-only text (EN and PT).

    A sentence is small talk when it has no words at all, or at most eight words that all come
    from the greeting/thanks vocabulary ("oi, tudo bem?", "thanks a lot!", "ok", "kkkk").
    """
    words = [fold_word(match.group()) for match in WORD_RE.finditer(sentence)]
    if not words:
        return True
    if " ".join(words) in _SMALL_TALK_PHRASES:
        return True
    if len(words) > _SMALL_TALK_MAX_WORDS:
        return False
    return all(word in _SMALL_TALK_WORDS or _LAUGHTER.match(word) for word in words)


# --- language --------------------------------------------------------------------------

_PT_MARKERS = _words(
    "eu você voce não nao que de do da dos das em no na nos nas um uma com para pra meu minha meus "
    "minhas está esta estou sou é tem tenho mas também tambem mais muito já ja ele ela eles elas "
    "moro mora trabalho trabalha gosto gosta seu sua isso esse essa ao aos pelo pela foi vou vai "
    "hoje ontem amanhã amanha agora aqui ainda nosso nossa adoro adora amo ama namorada namorado esposa "
    "marido irmã irma irmão irmao mãe mae pai filho filha amigo amiga saiu entrou cachorro gato chama "
    "chamado chamada trabalhava morava casado casada se mudei mudou gosto estudo estuda faz fiz"
)
_EN_MARKERS = _words(
    "the and i i'm i've i'll is am are was were my to of in it you that for on with at have has "
    "we he she they this be been but not does did just like live lives work works from your "
    "our his her their mine myself will would can there what today yesterday"
)
_PT_LETTERS = frozenset("ãõçáéíóúâêôàÃÕÇÁÉÍÓÚÂÊÔÀ")
_PT_SHAPE = re.compile(r"^[a-z]{2,}(?:ou|ei|am|inh[oa]s?)$|^[a-z]*(?:nh|lh)[aeiou]")
_EN_SHAPE_EXCEPTIONS = frozenset({"you", "thou", "though", "through", "am", "spam", "team", "dream", "exam"})


def detect_language(text: str, default: Language = "en", pt_words: frozenset[str] = frozenset()) -> Language:
    """``"pt"`` or ``"en"`` by counting marker words (and Portuguese accented letters).

    ``pt_words`` adds lower-case Portuguese words to the built-in markers (the verb tables of
    :mod:`.patterns`); a tie gives ``default``.
    """
    pt = sum(2 for ch in text if ch in _PT_LETTERS)
    en = 0
    for match in WORD_RE.finditer(text):
        word = match.group().lower()
        if word in _PT_MARKERS or word in pt_words:
            pt += 1
        elif _PT_SHAPE.search(word) and word not in _EN_SHAPE_EXCEPTIONS:
            pt += 1  # "contratou", "trabalhei", "sozinho", "filha": Portuguese by spelling alone
        if word in _EN_MARKERS:
            en += 1
    if pt == en:
        return default
    return "pt" if pt > en else "en"


# --- folding with positions ------------------------------------------------------------

_FOLD_CHAR: dict[str, str] = {}


def _fold_char(ch: str) -> str:
    folded = _FOLD_CHAR.get(ch)
    if folded is None:
        candidate = fold(ch) if not ch.isspace() else ch
        lowered = ch.lower()
        if len(candidate) == 1:
            folded = candidate
        elif len(lowered) == 1:
            folded = lowered
        else:
            folded = ch
        _FOLD_CHAR[ch] = folded
    return folded


def fold_aligned(text: str) -> str:
    """Like :func:`~memory_core.write.naming.fold` but one output char per input char.

    Positions in the folded text are positions in ``text``, so matches found on the folded
    form (case- and accent-insensitive) can be cut from the original.
    """
    if text.isascii():
        return text.lower()
    return "".join(map(_fold_char, text))


# --- capitalised names -----------------------------------------------------------------

# Never names, wherever they appear (pronouns, calendar words, chat acronyms, languages and
# nationalities, titles).
_CALENDAR = _words(
    "monday tuesday wednesday thursday friday saturday sunday mon tue wed thu fri sat sun "
    "segunda terça terca quarta quinta sexta sábado sabado domingo "
    "january february march april may june july august september october november december "
    "janeiro fevereiro março marco abril maio junho julho agosto setembro outubro novembro dezembro "
    "jan feb mar apr jun jul aug sep sept oct nov dec"
)
ALWAYS_STOP = _CALENDAR | _words(
    "i i'm i’m i've i’ve i'll i’ll i'd i’d im ive eu "
    "ok okay tv pm am lol omg btw fyi asap pls plz ps obs etc "
    "mr mrs ms dr dra sr sra srta prof profa sir madam dona seu "
    "god deus jesus christmas easter páscoa carnaval halloween thanksgiving "
    "english portuguese spanish french german italian japanese chinese russian korean arabic dutch "
    "inglês ingles português portugues espanhol francês frances alemão alemao italiano japonês "
    "japones chinês chines russo coreano árabe arabe holandês holandes "
    "brazilian american british canadian mexican argentinian portuguese european asian african "
    "brasileiro brasileira americano americana europeu europeia "
    "internet wifi whatsapp"
)

# Capitalised only because they start a sentence: pronouns, articles, determiners, conjunctions,
# prepositions, adverbs, interrogatives, greetings and frequent verbs (EN and PT).
INITIAL_STOP = ALWAYS_STOP | _words(
    # English
    "a an the my mine your yours his her hers its our ours their theirs me myself you he she it we "
    "they them him us this that these those there here what who whom whose which when where why how "
    "and but or so because if then than though although while since until unless also just only "
    "even still already yet again maybe perhaps probably actually really basically honestly finally "
    "recently currently usually sometimes always never often lately apparently anyway anyways "
    "besides however meanwhile otherwise instead today yesterday tomorrow tonight now later soon "
    "last next every each all some any many much most more less few several both either neither no "
    "not yes yeah yep nope ok okay oh ah hey hi hello thanks thank please sorry well so wow cool "
    "nice great good bad sure right after before during at in on to for from with without about "
    "into onto over under between among through across around near by of as like unlike "
    "is are was were be been being am do does did done have has had having will would can could "
    "shall should may might must went go goes going gone got get gets getting made make makes "
    "took take takes came come comes saw see sees met meet meets told tell said say says "
    "think thought know knew feel felt want wanted need needed love loved like liked hate "
    "hated live lived work worked moved started left joined bought found gave give keep kept let "
    "let's lets look looking looks seems seemed tried try trying call called guess hope hoping "
    "remember forgot visited watched played spent planning decided finished "
    "mom mum dad mommy daddy grandma grandpa honey babe baby dear everyone everybody someone "
    "somebody anyone anybody nobody nothing something anything everything "
    "one two three four five six seven eight nine ten first second third "
    # Portuguese
    "o a os as um uma uns umas meu minha meus minhas teu tua seu sua seus suas nosso nossa nossos "
    "nossas dele dela deles delas eu tu você voce vocês voces ele ela nós nos eles elas me te se "
    "lhe mim comigo isso isto aquilo esse essa este esta aquele aquela esses essas estes estas "
    "que quem qual quais quando onde como porque porquê por quê quanto quanta "
    "e mas ou então entao porém porem contudo todavia pois logo também tambem só so apenas "
    "ainda já ja talvez acho hoje ontem amanhã amanha agora depois antes sempre nunca jamais "
    "aqui ali lá la cá ca sim não nao oi olá ola obrigado obrigada valeu bom boa bem mal "
    "muito muita muitos muitas pouco pouca todo toda todos todas cada outro outra outros outras "
    "mesmo mesma algum alguma alguém alguem ninguém ninguem nada tudo algo "
    "de do da dos das em no na nos nas num numa ao aos à às pelo pela pelos pelas para pra pro "
    "com sem sobre entre até ate desde após apos contra durante segundo conforme "
    "sou é e era foi fui somos são sao estou está esta estava estive esteve estamos estão "
    "tenho tem tinha tive teve temos têm vou vai vamos vão fiz fez faço faz quero quer queria "
    "posso pode podia sei sabe moro mora morei morou morava trabalho trabalha trabalhei "
    "trabalhou trabalhava gosto gosta gostei gostou adoro adora amo ama estudo estuda estudei "
    "comecei começou conheci conheceu casei casou mudei mudou saí saiu entrei entrou voltei "
    "voltou comprei comprou viajei viajou nasci nasceu cresci cresceu fiquei ficou acabei "
    "acabou preciso precisa vi viu falei falou disse liguei ligou encontrei encontrou "
    "finalmente realmente provavelmente basicamente recentemente atualmente geralmente "
    "sinceramente infelizmente felizmente aliás alias enfim tipo bora vamo "
    "mãe mae pai vó vo vô avó avô tia tio amor querido querida gente galera pessoal "
    "primeiro primeira segundo segunda terceiro terceira dois duas três tres"
)

# Lower-case words that may sit inside a name: "Rio de Janeiro", "Bank of America".
_CONNECTORS = frozenset({"de", "da", "do", "dos", "das", "del", "della", "di", "du", "van", "von", "der", "of", "the"})
_POSSESSIVE_SUFFIXES = ("'s", "’s")
_CONTRACTION_SUFFIXES = ("'re", "’re", "'ve", "’ve", "'ll", "’ll", "'d", "’d", "'m", "’m", "n't", "n’t")
_SHOUTING_MIN_LETTERS = 12
_SHOUTING_UPPER_SHARE = 0.7


@dataclass(frozen=True, slots=True)
class NameSpan:
    """A run of capitalised words: ``text`` is ``sentence[start:end]`` without a trailing 's."""

    start: int
    end: int
    text: str
    possessive: bool = False


def _looks_like_common_word(word: str) -> bool:
    """Sentence-initial single words that are verbs or adverbs by shape ("Finished", "Finalmente")."""
    folded = fold_word(word)
    if folded in INITIAL_STOP:
        return True
    if folded.endswith("mente") and len(folded) > 7:
        return True
    if len(folded) >= 6 and folded.endswith("ed") and not folded.endswith(("fred", "dred")):
        return True
    return len(folded) >= 6 and folded.endswith("ing")


def _is_shouting(sentence: str) -> bool:
    upper = sum(map(str.isupper, sentence))
    if upper < _SHOUTING_MIN_LETTERS * _SHOUTING_UPPER_SHARE:
        return False  # the usual case: a few capitals, decided without counting letters
    letters = sum(map(str.isalpha, sentence))
    return letters >= _SHOUTING_MIN_LETTERS and upper >= _SHOUTING_UPPER_SHARE * letters


def find_names(sentence: str) -> list[NameSpan]:
    """Capitalised single- and multi-word names in ``sentence``, in order.

    Joins capitalised words separated by single spaces, with lower-case connectors inside
    ("Rio de Janeiro", "Bank of America") and ``&``. Drops pronouns, calendar words and
    other :data:`ALWAYS_STOP` words anywhere, and sentence-initial common words (articles,
    pronouns, adverbs, frequent verbs: :data:`INITIAL_STOP`), so "O Thiago Nogueira" gives
    "Thiago Nogueira" and "Went hiking" gives nothing. A trailing possessive 's is cut off
    and flagged. All-caps ("shouted") sentences yield no names.
    """
    if _is_shouting(sentence):
        return []
    tokens = list(WORD_RE.finditer(sentence))
    count = len(tokens)
    names: list[NameSpan] = []
    index = 0
    while index < count:
        token = tokens[index]
        if not token.group()[0].isupper():
            index += 1
            continue
        members = [index]
        last = index
        while last + 1 < count and not _is_possessive(tokens[last].group()):
            nxt = tokens[last + 1]
            gap = sentence[tokens[last].end() : nxt.start()]
            if nxt.group()[0].isupper() and _joins(gap):
                members.append(last + 1)
                last += 1
                continue
            if (
                nxt.group().lower() in _CONNECTORS
                and gap == " "
                and last + 2 < count
                and tokens[last + 2].group()[0].isupper()
                and sentence[nxt.end() : tokens[last + 2].start()] == " "
            ):
                members.extend((last + 1, last + 2))
                last += 2
                continue
            break
        names.extend(_runs(sentence, tokens, members))
        index = last + 1
    return names


def _joins(gap: str) -> bool:
    return gap == " " or gap.strip() == "&"


def _is_possessive(word: str) -> bool:
    return word.endswith(_POSSESSIVE_SUFFIXES) and len(word) > 2


def _is_initial(sentence: str, token: re.Match[str]) -> bool:
    """Whether the token starts the sentence or follows a colon, dash or opening quote."""
    before = sentence[: token.start()].rstrip()
    return not before or before[-1] in ":;—–-\"“'‘«"


def _runs(sentence: str, tokens: list[re.Match[str]], members: list[int]) -> list[NameSpan]:
    """Split a capitalised group at stop words and trim connectors at its edges."""
    runs: list[list[int]] = [[]]
    for position, member in enumerate(members):
        word = tokens[member].group()
        folded = fold_word(word[:-2] if _is_possessive(word) else word)
        if folded.endswith(_CONTRACTION_SUFFIXES):
            runs.append([])  # "We're", "Don't", "It's": a contraction is never a name
            continue
        after_connector = position > 0 and tokens[members[position - 1]].group().lower() in _CONNECTORS
        if after_connector and folded in _CALENDAR:
            stop = False  # "Rio de Janeiro", "Primeiro de Maio": a month inside a name
        else:
            stop = folded in ALWAYS_STOP or (
                position == 0 and _is_initial(sentence, tokens[member]) and folded in INITIAL_STOP
            )
        if stop:
            runs.append([])
        else:
            runs[-1].append(member)
    spans: list[NameSpan] = []
    for run in runs:
        while run and tokens[run[0]].group().lower() in _CONNECTORS:
            run.pop(0)
        while run and tokens[run[-1]].group().lower() in _CONNECTORS:
            run.pop()
        if not run:
            continue
        first = tokens[run[0]]
        if len(run) == 1 and _is_initial(sentence, first) and _looks_like_common_word(first.group()):
            continue
        start = first.start()
        end = tokens[run[-1]].end()
        possessive = _is_possessive(tokens[run[-1]].group())
        if possessive:
            end -= 2
        spans.append(NameSpan(start=start, end=end, text=sentence[start:end], possessive=possessive))
    return spans
