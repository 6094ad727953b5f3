"""Entity resolution's fuzzy band: name embeddings + pgvector (today) against pg_trgm, on the same data.

``python -m ops.bench entity-trgm [--quick] [--embedder hashing|local] [--no-record]`` (or ``./ops/bench/entity-trgm``).

Today (``memory_core.write.resolve``) a mention no exact phase resolved is embedded and ranked
against the agent's entities by the cosine of their name embeddings
(:func:`memory_core.write.repository.nearest_entities`): ``>= fuzzy_threshold`` with compatible
names resolves, ``>= fuzzy_lower_threshold`` asks the disambiguation skill, below is new. The
alternative ranks the agent's names (``memory_entity_aliases``, which holds every display name,
mention and alias, folded) by pg_trgm's ``similarity`` or ``word_similarity`` to the folded
mention, with no embedding at all. This script compares the two, and leaves the service as it is:

1. **Decisions.** Corpus (a): the mentions and candidate entities of the resolution tests
   (offline and LLM disambiguation, seed scenarios), each in an agent of its own. Corpus (b):
   the LoCoMo sample (``../shared/data/locomo``) through the real write pipeline in process with
   offline skills and the hashing embedder (``--embedder local``: MiniLM), turn by turn; every fuzzy-band mention of the
   ``resolve`` stage is recorded with today's candidates and decision (as the pipeline made it)
   and every trigram score of the agent's entities at the same moment (the same database state).
   Each band (resolve / ask the skill / new) and each final outcome (resolved key or new, the
   offline skill answering the asks) is recomputed for pg_trgm at every threshold pair of a grid,
   and the pair that agrees most with today is reported as such: it is fitted on this corpus.
2. **Speed.** Agents of 200 and 2,000 seeded entities (names and aliases as the write path
   stores them): today's cost per fuzzy-band mention (the embedding call, here the in-process
   hashing embedder, plus the cosine statement) against the pg_trgm statement with a GIN
   ``gin_trgm_ops`` index on the aliases (the bench creates the extension and the index). Each
   way also reports its CPU per resolution: the user + system time of the connection's
   PostgreSQL backend and of this process's thread (the embedding call runs here), over
   blocks of one way at a time.

Figures are printed and appended to ops/bench/RESULTS.md; the records go to a JSON file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ops.bench.common import (
    IN_PROCESS_ROLE,
    SessionCpu,
    append_results,
    cpu_snapshot_of,
    machine_info,
    markdown_table,
    percentile,
    shielded,
)

THRESHOLD_STEPS = [round(0.05 * step, 2) for step in range(2, 21)]  # 0.10 .. 1.00
SCORES = ("similarity", "word_similarity")
SIZES = (200, 2_000)
TIMED_MENTIONS = 40
TIMED_ROUNDS = 5
BACKGROUND_AGENTS = 40  # of 500 entities each, beside the timed agents
CANDIDATES = 3  # llm_resolution_max_candidates' default
RECORDS_DIR = Path(tempfile.gettempdir())

# ---- the statements compared -------------------------------------------------------------

# Every score of every entity of the agent for one mention (evaluation only: no index needed).
_ALL_SCORES = """
SELECT e.canonical_key, e.display_name, e.entity_type,
       max(similarity(a.alias, :m)) AS similarity, max(word_similarity(:m, a.alias)) AS word_similarity
FROM memory_entity_aliases a
JOIN memory_entities e ON e.agent_id = a.agent_id AND e.canonical_key = a.canonical_entity_key
WHERE a.agent_id = :agent
GROUP BY e.canonical_key, e.display_name, e.entity_type
"""

# The shape the service would run: the trigram index finds the names above the lower threshold
# (the operators' threshold settings), the best few entities come back with what the skill needs.
_TRGM_SELECT = """
SELECT e.canonical_key, e.display_name, e.entity_type, e.profile_text, e.summary_text, s.score
FROM (SELECT canonical_entity_key, max({score}) AS score FROM memory_entity_aliases
      WHERE agent_id = :agent AND {match} GROUP BY canonical_entity_key) s
JOIN memory_entities e ON e.agent_id = :agent AND e.canonical_key = s.canonical_entity_key
ORDER BY s.score DESC, e.canonical_key LIMIT :limit
"""
TRGM_STATEMENTS = {
    "similarity": _TRGM_SELECT.format(score="similarity(alias, :m)", match="alias % :m"),
    "word_similarity": _TRGM_SELECT.format(score="word_similarity(:m, alias)", match=":m <% alias"),
    # The same answer as "similarity" without the index: every alias of the agent scored.
    "similarity, no trigram index": _TRGM_SELECT.format(
        score="similarity(alias, :m)", match="similarity(alias, :m) >= :lo"
    ),
}
THRESHOLD_SETTING = {
    "similarity": "pg_trgm.similarity_threshold",
    "word_similarity": "pg_trgm.word_similarity_threshold",
}
TRGM_INDEX = "ix_bench_entity_aliases_trgm"
TODAY_LABEL = "today: embedding + cosine"


# ---- one fuzzy-band mention --------------------------------------------------------------


@dataclass
class Candidate:
    """An entity as a ranking returns it."""

    key: str
    name: str
    type: str
    score: float


@dataclass
class Record:
    """One fuzzy-band mention: today's candidates and decision, every entity's trigram scores."""

    corpus: str
    agent: str
    mention: str
    mention_type: str
    today_candidates: list[Candidate]
    today_band: str
    today_key: str | None
    pipeline_method: str = ""
    pipeline_key: str | None = None
    trgm: dict[str, list[Candidate]] = field(default_factory=dict)  # score -> every entity, best first


def _band(best: Candidate | None, mention: str, hi: float, lo: float) -> str:
    from memory_core.write.naming import names_compatible

    if best is not None and best.score >= hi and names_compatible(mention, best.name):
        return "resolve"
    if best is not None and best.score >= lo:
        return "ask"
    return "new"


def decide(
    mention: str, mention_type: str, candidates: Sequence[Candidate], hi: float, lo: float
) -> tuple[str, str | None]:
    """``(band, resolved key or None)``: resolve.py's fuzzy-band rules, the offline skill answering the asks."""
    from memory_core.cognition.models import DisambiguationInput, EntityCandidate
    from memory_core.cognition.offline.disambiguation import disambiguate
    from memory_core.write.naming import names_compatible

    top = list(candidates[:CANDIDATES])
    best = top[0] if top else None
    band = _band(best, mention, hi, lo)
    if band == "resolve" and best is not None:
        return band, best.key
    if band == "new":
        return band, None
    output = disambiguate(
        DisambiguationInput(
            mention=mention,
            mention_type=mention_type,
            message="",
            candidates=[
                EntityCandidate(
                    canonical_key=c.key, display_name=c.name, entity_type=c.type, similarity=round(c.score, 4)
                )
                for c in top
                if c.score >= lo
            ],
        )
    )
    picked = next((c for c in top if c.key == output.match), None)
    if picked is not None and not names_compatible(mention, picked.name):
        picked = None
    return band, picked.key if picked else None


def trgm_candidates(record: Record, score: str, lo: float) -> list[Candidate]:
    """The service statement's answer: entities scoring >= ``lo``, best first, ties by key."""
    ranked = [c for c in record.trgm[score] if c.score >= lo]
    return sorted(ranked, key=lambda c: (-c.score, c.key))[:CANDIDATES]


# ---- database helpers --------------------------------------------------------------------


def _today_candidates(conn: Any, agent: str, vector: Sequence[float]) -> list[Candidate]:
    from memory_core.write import repository

    with _session(conn) as session:
        rows = repository.nearest_entities(session, agent, vector, CANDIDATES)
    return [Candidate(row.canonical_key, row.display_name or "", row.entity_type, score) for row, score in rows]


@contextlib.contextmanager
def _session(conn: Any) -> Iterator[Any]:
    from sqlalchemy.orm import Session

    session = Session(bind=conn)
    try:
        yield session
    finally:
        session.close()


def _all_trgm(conn: Any, agent: str, mention: str) -> dict[str, list[Candidate]]:
    from sqlalchemy import text

    from memory_core.write.naming import normalize_alias

    rows = conn.execute(text(_ALL_SCORES), {"agent": agent, "m": normalize_alias(mention)}).all()
    return {
        name: sorted(
            (Candidate(r[0], r[1] or "", r[2], float(r[3 + index])) for r in rows), key=lambda c: (-c.score, c.key)
        )
        for index, name in enumerate(SCORES)
    }


def _insert_entities(
    conn: Any, embedder: Any, agent: str, entities: Sequence[tuple[str, str, str, Sequence[str]]]
) -> None:
    """Entities ``(key, name, type, aliases)`` as the write path stores them: name embedding, folded aliases."""
    from sqlalchemy import text

    from memory_core.db.vectors import vector_param
    from memory_core.write.naming import normalize_alias

    vectors = embedder.embed([name for _, name, _, _ in entities])
    conn.execute(
        text(
            "INSERT INTO memory_entities (agent_id, canonical_key, display_name, entity_type, embedding_vec) "
            "VALUES (:agent, :key, :name, :type, :vec)"
        ),
        [
            {"agent": agent, "key": key, "name": name, "type": kind, "vec": vector_param(vec)}
            for (key, name, kind, _), vec in zip(entities, vectors, strict=True)
        ],
    )
    conn.execute(
        text(
            "INSERT INTO memory_entity_aliases (agent_id, alias, canonical_entity_key, canonical_entity_type) "
            "VALUES (:agent, :alias, :key, :type) ON CONFLICT (agent_id, alias) DO NOTHING"
        ),
        [
            {"agent": agent, "alias": normalize_alias(alias), "key": key, "type": kind}
            for key, name, kind, aliases in entities
            for alias in dict.fromkeys((name, *aliases))
        ],
    )


# ---- corpus (a): the resolution tests --------------------------------------------------------

# (mention, mention type, candidate entities (key, name, type, aliases)), from
# tests/memory_core/cognition/offline/test_disambiguation.py, .../llm/test_resolution.py and
# tests/workers/test_seed_scenarios.py: what the exact phases would not all catch is kept as is.
_P, _O = "person", "organization"
TEST_CASES: list[tuple[str, str, list[tuple[str, str, str, list[str]]]]] = [
    ("Carol", _P, [("person:marcos", "Marcos", _P, []), ("person:carolina_souza", "Carolina Souza", _P, [])]),
    ("Pedro", _P, [("person:marcos", "Marcos", _P, []), ("person:carolina_souza", "Carolina Souza", _P, [])]),
    ("Guili", _P, [("person:guilherme_maturana", "Guilherme Maturana", _P, []),
                   ("place:guildford", "Guildford", "place", [])]),
    ("Souza", _P, [("person:carolina_souza", "Carolina Souza", _P, [])]),
    ("Rafa", _P, [("person:rafael_lima", "Rafael Lima", _P, [])]),
    ("joao", _P, [("person:joao", "João", _P, [])]),
    ("JULIA MENDES", _P, [("person:julia_mendes", "Júlia Mendes", _P, [])]),
    ("Marta", _P, [("person:marcos", "Marcos", _P, [])]),
    ("Jo", _P, [("person:joao", "João", _P, [])]),
    ("Carol", _P, [("person:carolina_souza", "Carolina Souza", _P, []), ("person:carol_lima", "Carol Lima", _P, [])]),
    ("Orion", _P, [("organization:orion_tech", "Orion Tech", _O, [])]),
    ("Orion", _O, [("organization:orion_tech", "Orion Tech", _O, [])]),
    ("Vertix", _O, [("organization:vertical", "Vertical Labs", _O, [])]),
    ("Ana Silva", _P, [("person:ana_souza", "Ana Souza", _P, [])]),
    ("Carolina", _P, [("person:caroline", "Caroline", _P, ["Carol"])]),
    ("Guilherme", _P, [("person:guilherme_maturana", "Guilherme Maturana", _P, ["Guili"])]),
    ("Clara", _P, [("person:clara_rezende", "Clara Rezende", _P, []), ("organization:vertix", "Vertix", _O, [])]),
    ("Vertix Labs", _O, [("organization:vertix", "Vertix", _O, []),
                         ("organization:orion_tech", "Orion Tech", _O, [])]),
    ("Lucia", _P, [("person:dona_lucia", "Dona Lúcia", _P, []), ("place:curitiba", "Curitiba", "place", [])]),
    ("Curitiba PR", "place", [("place:curitiba", "Curitiba", "place", [])]),
]  # fmt: skip


def corpus_tests(conn: Any, embedder: Any) -> list[Record]:
    """Each test case in an agent of its own: both rankings of its candidates, today's decision."""
    records: list[Record] = []
    config = _config()
    for index, (mention, kind, entities) in enumerate(TEST_CASES):
        agent = f"trgm-test-{index}"
        _insert_entities(conn, embedder, agent, entities)
        [vector] = embedder.embed([mention])
        today = _today_candidates(conn, agent, vector)
        band, key = decide(mention, kind, today, config.fuzzy_threshold, config.fuzzy_lower_threshold)
        records.append(Record("tests", agent, mention, kind, today, band, key, trgm=_all_trgm(conn, agent, mention)))
    return records


def _config() -> Any:
    from memory_core.config import MemoryConfig

    return MemoryConfig()


# ---- corpus (b): LoCoMo through the pipeline -------------------------------------------------


def corpus_locomo(wctx: Any, quick: bool) -> tuple[list[Record], int, float]:
    """Ingest the LoCoMo sample through the pipeline, recording every fuzzy-band mention of ``resolve``.

    The recorder wraps the stage's ``resolve_entities``: once it has decided (it only reads),
    today's candidates and every trigram score are read at that same database state.
    Returns the records, the turns that failed and the ingest time.
    """
    from memory_core.write import pipeline
    from memory_core.write.naming import normalize_alias, normalize_entity_type
    from memory_core.write.resolve import _strip_hint
    from ops.bench.ingest import LOCOMO_PATH
    from ops.bench.locomo import EmbedderRun, ingest, load_conversations

    original = pipeline.resolve_entities  # type: ignore[attr-defined]
    records: list[Record] = []

    def recording(ctx: Any, session: Any, **kwargs: Any) -> Any:
        output = original(ctx, session, **kwargs)
        # The fuzzy band's entities are the ones resolve embedded (it keeps the vector for upsert).
        band = [item for item in output.entities if item.embedding is not None]
        if not band:
            return output
        agent, config = kwargs["agent_id"], kwargs["config"]
        cleaned = {normalize_alias(e.name): e for e in map(_strip_hint, kwargs["entities"])}
        with wctx.autocommit_engine.connect() as conn:
            for item in band:
                entity = cleaned[item.mention]
                assert item.embedding is not None
                kind = normalize_entity_type(entity.type)
                today = _today_candidates(conn, agent, item.embedding)
                decided = decide(entity.name, kind, today, config.fuzzy_threshold, config.fuzzy_lower_threshold)
                records.append(
                    Record(
                        "locomo",
                        agent,
                        entity.name,
                        kind,
                        today,
                        decided[0],
                        decided[1],
                        pipeline_method=item.method,
                        pipeline_key=None if item.method == "new" else item.canonical_key,
                        trgm=_all_trgm(conn, agent, entity.name),
                    )
                )
        return output

    pipeline.resolve_entities = recording  # type: ignore[attr-defined]
    try:
        conversations = load_conversations(LOCOMO_PATH, quick=quick)
        run = EmbedderRun(name=wctx.settings.embedding_provider or "hashing", label="")
        ingest(wctx, conversations, run)
    finally:
        pipeline.resolve_entities = original  # type: ignore[attr-defined]
    return records, len(run.failed), run.ingest_s


# ---- calibration -------------------------------------------------------------------------


@dataclass
class Agreement:
    """pg_trgm's decisions at one threshold pair against today's."""

    score: str
    hi: float
    lo: float
    total: int = 0
    outcome_same: int = 0
    band_same: int = 0
    added_merges: int = 0  # today new, pg_trgm resolves
    other_merges: int = 0  # both resolve, to different entities
    lost_merges: int = 0  # today resolves, pg_trgm new
    asks_today: int = 0
    asks_trgm: int = 0
    contested: int = 0  # mentions where either side does not simply create a new entity
    contested_same: int = 0
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    @property
    def outcome_pct(self) -> float:
        """Share of mentions with the same outcome (same key, or new both ways)."""
        return 100.0 * self.outcome_same / self.total if self.total else float("nan")

    @property
    def band_pct(self) -> float:
        """Share of mentions in the same band (resolve / ask / new)."""
        return 100.0 * self.band_same / self.total if self.total else float("nan")


def agreement(records: Sequence[Record], score: str, hi: float, lo: float, *, keep: int = 0) -> Agreement:
    """Compare every record's pg_trgm decision at ``(hi, lo)`` with today's."""
    result = Agreement(score, hi, lo, total=len(records))
    for record in records:
        candidates = trgm_candidates(record, score, lo)
        band, key = decide(record.mention, record.mention_type, candidates, hi, lo)
        result.asks_today += record.today_band == "ask"
        result.asks_trgm += band == "ask"
        result.band_same += band == record.today_band
        if band != "new" or record.today_band != "new":
            result.contested += 1
            result.contested_same += key == record.today_key
        if key == record.today_key:
            result.outcome_same += 1
            continue
        if record.today_key is None:
            result.added_merges += 1
        elif key is None:
            result.lost_merges += 1
        else:
            result.other_merges += 1
        if len(result.disagreements) < keep:
            result.disagreements.append(
                {
                    "corpus": record.corpus,
                    "mention": f"{record.mention} ({record.mention_type})",
                    "today": f"{record.today_band} -> {record.today_key or 'new'}",
                    "today_candidates": ", ".join(f"{c.name} {c.score:.2f}" for c in record.today_candidates),
                    "pg_trgm": f"{band} -> {key or 'new'}",
                    "trgm_candidates": ", ".join(f"{c.name} {c.score:.2f}" for c in candidates),
                }
            )
    return result


def calibrate(records: Sequence[Record], score: str) -> Agreement:
    """The threshold pair whose decisions agree most with today's (then the bands, then fewer added merges)."""
    best: Agreement | None = None
    for hi in THRESHOLD_STEPS:
        for lo in THRESHOLD_STEPS:
            if lo > hi:
                continue
            found = agreement(records, score, hi, lo)
            rank = (found.outcome_same, found.band_same, -found.added_merges - found.other_merges)
            if best is None or rank > (best.outcome_same, best.band_same, -best.added_merges - best.other_merges):
                best = found
    assert best is not None
    return agreement(records, score, best.hi, best.lo, keep=12)


# ---- speed -------------------------------------------------------------------------------

_FIRST = [
    "Ana", "Bruno", "Carla", "Daniel", "Eduarda", "Fabio", "Gabriela", "Heitor", "Isabela", "Joaquim", "Karina",
    "Leonardo", "Mariana", "Nicolas", "Olivia", "Paulo", "Quiteria", "Renata", "Samuel", "Tatiana", "Ulisses",
    "Valeria", "Wagner", "Yasmin", "Zeca", "Adriana", "Bernardo", "Cecilia", "Diego", "Elisa", "Felipe",
    "Giovana", "Hugo", "Ingrid", "Jonas", "Larissa", "Murilo", "Natalia", "Otavio", "Patricia", "Ricardo",
    "Sofia", "Tiago", "Vanessa", "Vitor", "Alice", "Arthur", "Beatriz", "Caio", "Debora", "Emanuel", "Flavia",
    "Gustavo", "Helena", "Igor", "Julia", "Lucas", "Melissa", "Nathan", "Pietra", "Rodrigo", "Sabrina",
    "Teodoro", "Vinicius", "Amanda", "Breno", "Camila", "Davi", "Estela", "Fernando",
]  # fmt: skip
_LAST = [
    "Almeida", "Barbosa", "Cardoso", "Dias", "Esteves", "Ferreira", "Gomes", "Henriques", "Izidoro",
    "Junqueira", "Klein", "Lopes", "Moraes", "Nogueira", "Oliveira", "Pereira", "Queiroz", "Ribeiro", "Santos",
    "Teixeira", "Uchoa", "Vasconcelos", "Werneck", "Xavier", "Yamada", "Zanetti", "Araujo", "Brandao", "Campos",
    "Duarte", "Espindola", "Fonseca", "Guimaraes", "Holanda", "Jardim", "Lacerda", "Macedo", "Neves", "Pacheco",
    "Rezende", "Siqueira", "Tavares", "Valente", "Amaral", "Bastos", "Coelho", "Drummond", "Freitas", "Goulart",
    "Leite", "Medeiros", "Pinheiro",
]  # fmt: skip
_PLACES = [
    "Curitiba", "Londrina", "Maringa", "Joinville", "Blumenau", "Florianopolis", "Pelotas", "Caxias", "Gramado",
    "Canela", "Santos", "Campinas", "Sorocaba", "Jundiai", "Ribeirao", "Franca", "Bauru", "Marilia", "Limeira",
    "Piracicaba", "Niteroi", "Petropolis", "Teresopolis", "Vitoria", "Vilhena", "Ilheus", "Itabuna", "Olinda",
    "Recife", "Natal", "Mossoro", "Sobral", "Crato", "Juazeiro", "Petrolina", "Aracaju",
]  # fmt: skip
_ORGS = [
    "Vertix", "Orion", "Atlas", "Boreal", "Cobalto", "Delta", "Epsilon", "Fenix", "Granito", "Horizonte",
    "Iris", "Jade", "Kappa", "Lumen", "Mosaico", "Nimbus", "Onix", "Prisma", "Quasar", "Rubi", "Safira",
    "Titan", "Umbra", "Vetor", "Zenite",
]  # fmt: skip
_ORG_SUFFIX = ["Tech", "Labs", "Consultoria", "Engenharia", "Foods", "Saude", "Digital", "Logistica"]


def seeded_entities(count: int, rng: random.Random) -> list[tuple[str, str, str, list[str]]]:
    """``count`` distinct entities: ~80% people (``First Last``, a third with a first-name alias), places, orgs."""
    from memory_core.write.naming import entity_key

    names: dict[str, tuple[str, str, str, list[str]]] = {}
    while len(names) < count:
        roll = rng.random()
        if roll < 0.8:
            first, last = rng.choice(_FIRST), rng.choice(_LAST)
            name, kind = f"{first} {last}", "person"
            if rng.random() < 0.3:
                name = f"{first} {rng.choice(_LAST)} {last}"
            aliases = [first] if rng.random() < 0.33 else []
        elif roll < 0.9:
            name, kind, aliases = (
                f"{rng.choice(_PLACES)} {rng.choice(['Centro', 'Norte', 'Sul', 'Leste'])}",
                "place",
                [],
            )
        else:
            name, kind, aliases = f"{rng.choice(_ORGS)} {rng.choice(_ORG_SUFFIX)}", "organization", []
        key = entity_key(kind, name)
        names.setdefault(key, (key, name, kind, aliases))
    return list(names.values())


def timed_mentions(entities: Sequence[tuple[str, str, str, list[str]]], rng: random.Random) -> list[str]:
    """Half near-variants of seeded names (a diminutive, a typo, a surname), half unknown names."""
    mentions: list[str] = []
    for _, name, _, _ in rng.sample(list(entities), TIMED_MENTIONS // 2):
        words = name.split()
        form = rng.randrange(3)
        if form == 0:
            mentions.append(words[0][:4] + (" " + words[-1] if len(words) > 1 else ""))
        elif form == 1:
            cut = rng.randrange(1, len(name) - 1)
            mentions.append(name[:cut] + name[cut + 1 :])
        else:
            mentions.append(words[-1])
    unknown_first = ["Zoraide", "Ubirajara", "Cleiton", "Rosangela", "Waldir", "Iracema", "Osvaldo", "Edite"]
    unknown_last = ["Petrucci", "Kowalski", "Nakamura", "Ostrowski", "Bittencourt", "Magalhaes"]
    for _ in range(TIMED_MENTIONS - len(mentions)):
        mentions.append(f"{rng.choice(unknown_first)} {rng.choice(unknown_last)}")
    return mentions


@dataclass
class Timing:
    """Milliseconds per fuzzy-band mention, by method, for one agent size."""

    size: int
    ms: dict[str, list[float]] = field(default_factory=dict)
    plans: dict[str, str] = field(default_factory=dict)
    # CPU of each whole way of resolving (its PostgreSQL backend and this thread), over the counted rounds.
    cpu: dict[str, SessionCpu] = field(default_factory=dict)

    @contextlib.contextmanager
    def counting(self, label: str, backend: int, counted: bool) -> Iterator[None]:
        """Count the block's CPU under ``label`` (nothing in a warm-up round)."""
        if not counted:
            yield
            return
        with self.cpu.setdefault(label, SessionCpu(backend)).counting():
            yield

    def cpu_cell(self, label: str) -> str:
        """``1.23 (postgres 0.80)`` ms per resolution, ``-`` for a part of a way."""
        meter = self.cpu.get(label)
        if meter is None:
            return "-"
        server, client = meter.ms_per(len(self.ms.get(label, [])))
        return "n/a" if math.isnan(server) else f"{server + client:.2f} (postgres {server:.2f})"


def _trgm_lo(name: str, thresholds: dict[str, float]) -> float:
    return thresholds["word_similarity" if name.startswith("word") else "similarity"]


def measure_speed(wctx: Any, thresholds: dict[str, float], rounds: int, background: int) -> list[Timing]:
    """Seed the timed agents among ``background`` others of 500 entities, then time each way, interleaved.

    The other agents make the tables look like a shared service's (the planner then has a
    reason to use the indexes); each trigram statement is also timed with sequential scans
    disabled, which is what the GIN index alone costs.
    """
    from sqlalchemy import text

    from memory_core.write import repository
    from memory_core.write.naming import normalize_alias

    rng = random.Random(44)  # noqa: S311 - reproducible test data, not secrets
    timings: list[Timing] = []
    with wctx.autocommit_engine.connect() as conn:
        for index in range(background):
            _insert_entities(conn, wctx.embedder, f"trgm-other-{index}", seeded_entities(500, rng))
        seeded = {size: seeded_entities(size, rng) for size in SIZES}
        for size, entities in seeded.items():
            _insert_entities(conn, wctx.embedder, f"trgm-speed-{size}", entities)
        conn.execute(
            text(f"CREATE INDEX IF NOT EXISTS {TRGM_INDEX} ON memory_entity_aliases USING gin (alias gin_trgm_ops)")
        )
        conn.execute(text("ANALYZE memory_entities"))
        conn.execute(text("ANALYZE memory_entity_aliases"))
        for size, entities in seeded.items():
            agent = f"trgm-speed-{size}"
            mentions = timed_mentions(entities, rng)
            timing = Timing(size)
            with _session(conn) as session:
                for score, setting in THRESHOLD_SETTING.items():
                    session.execute(
                        text("SELECT set_config(:n, :v, false)"), {"n": setting, "v": str(thresholds[score])}
                    )
                for name, statement in TRGM_STATEMENTS.items():
                    params = {"agent": agent, "m": normalize_alias(mentions[-1]), "limit": 3}
                    plan = session.execute(text("EXPLAIN " + statement), {**params, "lo": _trgm_lo(name, thresholds)})
                    timing.plans[name] = "; ".join(line.strip() for line in plan.scalars() if "Scan" in line)
                backend = int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())
                # Each way runs over every mention in a block of its own (ways alternate within a
                # round, rounds repeat), so that each block's CPU is that way's alone.
                for round_index in range(rounds + 1):  # the first round warms caches and is dropped
                    counted = round_index > 0
                    today = TODAY_LABEL
                    for mention in mentions:
                        with timing.counting(today, backend, counted):
                            started = time.perf_counter()
                            [vector] = wctx.embedder.embed([mention])
                            embedded = time.perf_counter()
                            repository.nearest_entities(session, agent, vector, CANDIDATES)
                            done = time.perf_counter()
                        if counted:
                            for label, seconds in (
                                (f"embedding call ({type(wctx.embedder).__name__})", embedded - started),
                                ("cosine statement", done - embedded),
                                (today, done - started),
                            ):
                                timing.ms.setdefault(label, []).append(seconds * 1000.0)
                    for forced in (False, True):
                        if forced:
                            session.execute(text("SET enable_seqscan = off"))
                        for name, statement in TRGM_STATEMENTS.items():
                            if forced and "no trigram" in name:
                                continue
                            label = f"pg_trgm: {name}" + (", sequential scans off" if forced else "")
                            for mention in mentions:
                                params = {"agent": agent, "m": normalize_alias(mention), "limit": CANDIDATES}
                                with timing.counting(label, backend, counted):
                                    moment = time.perf_counter()
                                    session.execute(text(statement), {**params, "lo": _trgm_lo(name, thresholds)}).all()
                                    elapsed = time.perf_counter() - moment
                                if counted:
                                    timing.ms.setdefault(label, []).append(elapsed * 1000.0)
                        if forced:
                            session.execute(text("RESET enable_seqscan"))
            timings.append(timing)
        conn.execute(text(f"DROP INDEX IF EXISTS {TRGM_INDEX}"))
    return timings


# ---- run and report ------------------------------------------------------------------------


def _pipeline_check(records: Sequence[Record]) -> int:
    """Records where this script's replica of resolve.py's rules disagrees with the pipeline's own decision."""
    return sum(1 for r in records if r.corpus == "locomo" and r.today_key != r.pipeline_key)


def _fmt_ms(values: Sequence[float]) -> str:
    return f"{percentile(values, 50):.2f} / {percentile(values, 95):.2f}"


def report(
    records: Sequence[Record],
    calibrated: dict[str, Agreement],
    per_corpus: dict[str, dict[str, Agreement]],
    timings: Sequence[Timing],
    *,
    failed: int,
    ingest_s: float,
) -> str:
    """The markdown section: decisions, then speed."""
    locomo = [r for r in records if r.corpus == "locomo"]
    tests = [r for r in records if r.corpus == "tests"]
    today = Counter(r.today_band for r in records)
    lines = [
        f"- fuzzy-band mentions: {len(records):,} ({len(tests)} from the resolution tests, {len(locomo):,} from "
        f"LoCoMo: {len({(r.agent, r.mention.lower()) for r in locomo}):,} distinct per agent; ingest "
        f"{ingest_s:.0f} s, {failed} turns failed); today's bands: "
        + ", ".join(f"{band} {today[band]:,}" for band in ("resolve", "ask", "new")),
        f"- this script's replica of resolve.py's fuzzy rules disagrees with the pipeline's own decision on "
        f"{_pipeline_check(records)} LoCoMo mentions",
    ]
    rows = []
    for score, found in calibrated.items():
        for corpus, label in (("all", "both corpora"), ("tests", "tests"), ("locomo", "LoCoMo")):
            item = found if corpus == "all" else per_corpus[score][corpus]
            rows.append(
                (
                    score,
                    f"{found.hi:.2f} / {found.lo:.2f}",
                    label,
                    f"{item.total:,}",
                    f"{item.outcome_pct:.1f}%",
                    f"{item.band_pct:.1f}%",
                    f"{item.contested_same} of {item.contested}",
                    f"{item.added_merges} / {item.other_merges} / {item.lost_merges}",
                    f"{item.asks_today} / {item.asks_trgm}",
                )
            )
    table = markdown_table(
        (
            "pg_trgm score",
            "thresholds resolve / ask (fitted)",
            "corpus",
            "mentions",
            "same outcome",
            "same band",
            "same outcome where either side is not plain new",
            "merges today has not: added / other entity / lost",
            "asks today / pg_trgm",
        ),
        rows,
    )
    speed_rows = []
    for timing in timings:
        for label, values in timing.ms.items():
            speed_rows.append((f"{timing.size:,}", label, _fmt_ms(values), timing.cpu_cell(label)))
    speed = markdown_table(
        ("entities of the agent", "step", "ms p50 / p95", "CPU per resolution ms (PostgreSQL backend + this process)"),
        speed_rows,
    )
    plans = "\n".join(
        f"- plan at {timing.size:,} entities, {name}: {plan}"
        for timing in timings
        for name, plan in timing.plans.items()
    )
    examples = []
    for score, found in calibrated.items():
        for case in found.disagreements:
            examples.append(
                f"- {score}: {case['mention']} [{case['corpus']}]: today {case['today']} ({case['today_candidates']}); "
                f"pg_trgm {case['pg_trgm']} ({case['trgm_candidates']})"
            )
    return "\n".join(
        [
            *lines,
            "",
            table,
            "",
            "Disagreements at the fitted thresholds (up to 12 per score):",
            "",
            *examples,
            "",
            speed,
            "",
            plans,
        ]
    )


def run(quick: bool, record: bool, embedder: str) -> int:
    """Start an embedded PostgreSQL + Redis in a temporary home, measure, report, clean up."""
    from sqlalchemy import text

    from memory_core.db.migrate import upgrade
    from memory_core.settings import load_settings
    from memory_core.write.context import build_write_context
    from ops.bench.ingest import LOCOMO_PATH
    from ops.bench.locomo import load_conversations
    from ops.embedded import EmbeddedStack

    for name in list(os.environ):
        if name.startswith("ARANDU_") or name == "OPENAI_API_KEY":
            del os.environ[name]
    machine = machine_info()
    load = "load average at start {:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())
    home = Path(tempfile.mkdtemp(prefix="arandu-trgm-"))
    records_path = RECORDS_DIR / f"arandu-entity-trgm-{embedder}.json"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    stack = EmbeddedStack(home)
    code = 0
    try:
        stack.start()
        os.environ.update(
            {
                "ARANDU_DATABASE_URL": stack.postgres.ensure_database("arandu_trgm"),
                "ARANDU_BROKER_URL": stack.redis.url,
                "ARANDU_EMBEDDING_PROVIDER": embedder,
                "ARANDU_EMBEDDING_DIMENSIONS": "384",
            }
        )
        settings = load_settings()
        upgrade(settings)
        wctx = build_write_context(settings)
        try:
            with wctx.autocommit_engine.connect() as conn:
                conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
                records = corpus_tests(conn, wctx.embedder)
            print(f"tests corpus: {len(records)} mentions; LoCoMo ingest...", flush=True)
            # The pipeline runs in this process: its CPU and the embedded servers' are the stack's.
            servers = {"postgres": stack.postgres.data_dir, "redis": stack.redis.data_dir}
            cpu = cpu_snapshot_of({}, servers, own_role=IN_PROCESS_ROLE)
            locomo, failed, ingest_s = corpus_locomo(wctx, quick)
            turns = sum(len(t) for t in load_conversations(LOCOMO_PATH, quick=quick).messages.values())
            ingest_cpu = cpu_snapshot_of({}, servers, own_role=IN_PROCESS_ROLE).stack_cpu_cell(cpu, turns, "turn")
            records.extend(locomo)
            print(f"LoCoMo: {len(locomo):,} fuzzy-band mentions in {ingest_s:.0f} s; calibrating...", flush=True)
            records_path.write_text(json.dumps([asdict(r) for r in records]))
            calibrated = {score: calibrate(records, score) for score in SCORES}
            per_corpus = {
                score: {
                    corpus: agreement([r for r in records if r.corpus == corpus], score, found.hi, found.lo)
                    for corpus in ("tests", "locomo")
                }
                for score, found in calibrated.items()
            }
            print("speed...", flush=True)
            timings = measure_speed(
                wctx,
                {score: found.lo for score, found in calibrated.items()},
                2 if quick else TIMED_ROUNDS,
                BACKGROUND_AGENTS // 10 if quick else BACKGROUND_AGENTS,
            )
        finally:
            wctx.close()
        body = report(records, calibrated, per_corpus, timings, failed=failed, ingest_s=ingest_s)
        title = f"## Entity resolution's fuzzy band: pgvector cosine vs pg_trgm — {machine.date:%Y-%m-%d %H:%M} UTC"
        flag = (" --quick" if quick else "") + (f" --embedder {embedder}" if embedder != "hashing" else "")
        section = (
            f"{title}{' — quick' if quick else ''}\n\n- command: `./ops/bench/entity-trgm{flag}`\n"
            f"- machine: {machine.describe()}; {load}\n- embedder: {embedder}; records: {records_path}\n"
            f"- CPU of the LoCoMo ingest (PostgreSQL, Redis and this process, where the pipeline and the "
            f"recording of both rankings run): {ingest_cpu}\n\n{body}\n"
        )
        print("\n" + section)
        if record:
            append_results(section)
    except KeyboardInterrupt:
        code = 130
    except Exception as error:
        print(f"benchmark failed: {type(error).__name__}: {error}", file=sys.stderr)
        traceback.print_exc()
        code = 1
    finally:
        with shielded():
            stack.stop()
            import shutil

            shutil.rmtree(home, ignore_errors=True)
    return code
