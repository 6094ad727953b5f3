"""The model behind the OpenAI-compatible stub when this service and its peers run side by side.

One :class:`PeerModel` answers the chat calls of all three systems and serves the embeddings:

* **Who is asking** is read from the system prompt (:func:`owner_of`): this service's skills
  (``ops.bench.ingest.PROMPT_KINDS`` and its reranker), the reference SDK's (``arandu`` 0.14.3),
  mem0's. Only a few opening words of each peer's prompt are matched; their prompts and code are
  not copied.
* **Extraction is the same rule for everyone** (:func:`ops.bench.ingest._generic_annotation`): one
  fact per sentence of four words or more, first person rewritten to the speaker, in the JSON shape
  each system's parser accepts. Reconciliation answers "add", entity disambiguation "no match",
  emotion "neutral": the three do comparable work on comparable memories.
* **Rerankers** (this service's and the SDK's) get the same judge: the share of the query's
  content words a fact contains (:func:`overlap`).
* **Embeddings** are this service's hashing embedder (384 dimensions) over HTTP, so every system
  pays for its embedding calls. A request for more dimensions (the SDK's tables are fixed at 1536)
  gets the same vector padded with zeros: cosine similarities are identical for all three.
* Chat answers wait ``latency_s`` (a provider's latency); embeddings answer at once.

Calls and tokens (the stub's usage figures: characters / 4) are counted per system and prompt
kind; :meth:`PeerModel.take` reads and resets them at each phase boundary.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from memory_core.providers.hashing_embedder import HashingEmbedder, content_words
from ops.bench.ingest import ChatGenerator, StubModel, _generic_annotation, prompt_kind
from tests.support.openai_stub import StubReply, approx_tokens

OURS = "this service"
ARANDU = "arandu 0.14.3"
MEM0 = "mem0 2.2.1"
HASHING_DIMENSIONS = 384
# What a request that names no dimensions gets: the size text-embedding-3-small answers with, the
# size the SDK's tables are created with.
DEFAULT_DIMENSIONS = 1536

# The opening words of each peer's system prompts (enough to tell them apart; nothing more).
ARANDU_KINDS = (
    ("You are an emotion classifier", "emotion"),
    ("You are a personal knowledge extractor with access to existing memory", "extract_informed"),
    ("You are a memory reconciliation engine", "reconcile"),
    ("You resolve entity identity", "disambiguate"),
    ("You are a relevance judge for a long-term memory system", "rerank"),
)
MEM0_MARKER = "You are a Memory Extractor"
OUR_RERANK = "You decide which remembered facts"

_ARANDU_SPEAKER = re.compile(r'speaker of this message is "(?P<speaker>[^"]+)"')
_MEM0_NEW = re.compile(r"## New Messages\n(?P<block>.*?)\n\n## ", re.DOTALL)
_ROLE_LINE = re.compile(r"^(?:user|assistant|system): (?P<content>.*)$")
_NAMED = re.compile(r"^(?P<speaker>[^:\n]{1,60}): (?P<text>.*)$", re.DOTALL)
_ARANDU_FACT_LINE = re.compile(r"^\d+\. (?P<text>.+)$")
_OUR_FACT_LINE = re.compile(r"^\[(?P<id>\d+)\] (?P<text>.+)$")
_QUOTED_QUERY = re.compile(r'^Query: "(?P<query>.*)"$', re.MULTILINE)
_PLAIN_QUERY = re.compile(r"^Query: (?P<query>.*)$", re.MULTILINE)


def owner_of(system: str) -> tuple[str, str]:
    """(system, prompt kind) of a chat request, from its system prompt."""
    for prefix, kind in ARANDU_KINDS:
        if system.startswith(prefix):
            return ARANDU, kind
    if MEM0_MARKER in system[:400]:
        return MEM0, "extract"
    if system.startswith(OUR_RERANK):
        return OURS, "rerank"
    return OURS, prompt_kind(system)


def overlap(query: str, text: str) -> float:
    """The share of the query's content words found in ``text`` (0-1): the stub's relevance judge."""
    wanted = set(content_words(query))
    if not wanted:
        return 0.0
    return len(wanted & set(content_words(text))) / len(wanted)


def _facts(speaker: str, text: str) -> list[str]:
    return [fact.text for fact in _generic_annotation(speaker, text).facts]


@dataclass
class Tally:
    """Chat calls and tokens of one system in one phase."""

    calls: Counter[str] = field(default_factory=Counter)
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_calls(self) -> int:
        """Chat calls of every kind."""
        return sum(self.calls.values())

    @property
    def tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


class PeerModel:
    """Chat and embeddings handler of the stub for the peers benchmark (thread-safe)."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.ours = StubModel(ChatGenerator())
        self.embedder = HashingEmbedder(HASHING_DIMENSIONS)
        self._lock = threading.Lock()
        self._tallies: dict[str, Tally] = {}
        self._embedding_requests = 0
        self._embedded_texts = 0

    # -- counting ------------------------------------------------------------------------

    def take(self) -> tuple[dict[str, Tally], int, int]:
        """Tallies per system, embedding requests and texts since the last call; counting restarts."""
        with self._lock:
            tallies, self._tallies = self._tallies, {}
            requests, self._embedding_requests = self._embedding_requests, 0
            texts, self._embedded_texts = self._embedded_texts, 0
        return tallies, requests, texts

    # -- chat ------------------------------------------------------------------------------

    def chat(self, body: dict[str, Any]) -> StubReply:
        """The answer to one chat completion request, delayed by ``latency_s``."""
        messages = body.get("messages") or []
        system = next((str(m.get("content", "")) for m in messages if m.get("role") == "system"), "")
        user = next((str(m.get("content", "")) for m in reversed(messages) if m.get("role") == "user"), "")
        owner, kind = owner_of(system)
        if owner == OURS and kind != "rerank":
            content = self.ours(body)
        else:
            content = json.dumps(self.answer(owner, kind, system, user), ensure_ascii=False)
        # The same rule as the stub's usage block, so the figures are the ones each system saw.
        prompt = sum(approx_tokens(str(message.get("content", ""))) + 4 for message in messages)
        with self._lock:
            tally = self._tallies.setdefault(owner, Tally())
            tally.calls[kind] += 1
            tally.prompt_tokens += prompt
            tally.completion_tokens += approx_tokens(content)
        return StubReply(content=content, delay_s=self.latency_s)

    def answer(self, owner: str, kind: str, system: str, user: str) -> dict[str, Any]:
        """The JSON a model would answer to a peer's prompt (and to this service's reranker)."""
        if owner == MEM0:
            speaker, text = self._mem0_message(user)
            return {"memory": [{"text": fact, "attributed_to": "user"} for fact in _facts(speaker, text)]}
        if kind == "rerank" and owner == OURS:
            query = self._query(user)
            scores = [
                {"id": int(match.group("id")), "score": round(overlap(query, match.group("text")), 3)}
                for line in user.splitlines()
                if (match := _OUR_FACT_LINE.match(line.strip()))
            ]
            return {"scores": scores}
        if kind == "rerank":
            query = self._query(user)
            facts = user.split("\n\n", 1)[1] if "\n\n" in user else ""
            lines = [m.group("text") for line in facts.splitlines()[1:] if (m := _ARANDU_FACT_LINE.match(line))]
            return {"scores": [round(overlap(query, text), 3) for text in lines]}
        if kind == "emotion":
            return {"emotion_primary": "neutral", "emotion_intensity": 0.0, "energy_level": "medium"}
        if kind == "reconcile":
            return {"decisions": []}  # every new fact is added
        if kind == "disambiguate":
            return {"match_index": 0}
        if kind == "extract_informed":
            match = _ARANDU_SPEAKER.search(system)
            speaker = match.group("speaker") if match else "user"
            text = user.split("\n", 1)[1] if "\n" in user else user
            note = _generic_annotation(speaker, text.strip())
            return {
                "entities": [{"name": name, "type": kind_, "aliases": []} for name, kind_ in note.entities],
                "facts": [
                    {
                        "subject": fact.subject,
                        "fact": fact.text,
                        "confidence": 0.95,
                        "importance_category": fact.category,
                    }
                    for fact in note.facts
                ],
                "relations": [],
                "updated_profiles": {},
            }
        return {}

    @staticmethod
    def _query(user: str) -> str:
        match = _QUOTED_QUERY.search(user) or _PLAIN_QUERY.search(user)
        return match.group("query") if match else user

    @staticmethod
    def _mem0_message(user: str) -> tuple[str, str]:
        match = _MEM0_NEW.search(user)
        block = match.group("block") if match else user
        lines = [m.group("content") for line in block.splitlines() if (m := _ROLE_LINE.match(line))]
        content = "\n".join(lines) if lines else block
        named = _NAMED.match(content)
        if named is None:
            return "user", content
        return named.group("speaker").strip(), named.group("text").strip()

    # -- embeddings ----------------------------------------------------------------------------

    def embeddings(self, body: dict[str, Any]) -> StubReply:
        """Hashing vectors for the inputs, padded with zeros to the requested dimensions."""
        raw = body.get("input", [])
        texts = [raw] if isinstance(raw, str) else [str(item) for item in raw]
        dimensions = int(body.get("dimensions") or DEFAULT_DIMENSIONS)
        vectors = self.embedder.embed(texts)
        padding = [0.0] * max(dimensions - HASHING_DIMENSIONS, 0)
        data = [
            {"object": "embedding", "index": index, "embedding": vector[:dimensions] + padding}
            for index, vector in enumerate(vectors)
        ]
        tokens = sum(approx_tokens(text) for text in texts)
        with self._lock:
            self._embedding_requests += 1
            self._embedded_texts += len(texts)
        payload = {
            "object": "list",
            "data": data,
            "model": str(body.get("model", "stub-embedding")),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return StubReply(body=payload)
