"""The query without its names, for comparing it with messages by embedding.

"What did Caroline research?" asked of a conversation between Caroline and Melanie: the answer is
a message Caroline said ("Researching adoption agencies..."), and a message rarely names its own
speaker. The name in the query pulls the embedding towards the messages that *address* Caroline
by name ("Glad you agree, Caroline!") instead, whatever they are about. Relevant conversations
therefore compare the messages with the embedding of the query with its names left out ("What
did research?"); the names still count through the keyword signal, which matches each word
against a message's speaker and text, weighted by how rare it is (a speaker's name, said in half
the messages, weighs little; a rare place or title carries the match).

Names are the capitalised words :func:`~memory_core.cognition.offline.text.find_names` finds
(English and Portuguese rules: sentence-initial common words, pronouns and calendar words are
not names). Acronyms ("LGBTQ", "NASA") are kept: they name topics more often than people.
"""

from __future__ import annotations

import re

from memory_core.cognition.offline.text import find_names

__all__ = ["without_names"]

_POSSESSIVE = re.compile(r"^['’]s\b")
_SPACES = re.compile(r"\s+")


def without_names(query: str) -> str | None:
    """``query`` with its (non-acronym) names removed, or None when it names nobody or is nothing else."""
    spans = [span for span in find_names(query) if not span.text.replace(" ", "").isupper()]
    if not spans:
        return None
    pieces: list[str] = []
    position = 0
    for span in spans:
        pieces.append(query[position : span.start])
        rest = query[span.end :]
        # "Caroline's identity" -> "identity": the possessive goes with the name.
        possessive = _POSSESSIVE.match(rest)
        position = span.end + (possessive.end() if possessive else 0)
    pieces.append(query[position:])
    stripped = _SPACES.sub(" ", "".join(pieces)).strip()
    stripped = re.sub(r"\s+([?!.,;:])", r"\1", stripped)
    stripped = re.sub(r"[,;:]+(?=[?!.,;:]|$)", "", stripped)
    return stripped if any(ch.isalpha() for ch in stripped) else None
