"""Procedural memory on the read side: directives with decayed confidence, and the cached directive block.

- :func:`effective_confidence`: a directive's confidence decays x0.95 per week since it was last
  taught (learned or reinforced), never below 0.10 (seeds: ``base_confidence * 0.95^weeks``,
  floor 0.10). Reinforcement restarts the clock, which is what reinforcing means.
- :func:`directive_block`: the persona and the active directives (strongest effective
  confidence first) merged into one instruction block by the ``compose_directive_block`` skill
  (the LLM, or its rule twin offline or when the answer is unusable), within
  ``directive_max_tokens``. The block is cached in ``memory_directive_blocks`` under a hash of
  the persona, the budget and every active directive's id and reinforcement count: adding,
  reinforcing, superseding or deleting a directive changes the key, so a change misses the
  cache by construction; a row older than ``directive_cache_ttl_minutes`` is not used (0
  disables the cache). In PostgreSQL, so every API process shares it. Fail-safe as the seeds
  say: a provider error gives an empty block, never a failed request.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session, sessionmaker

from memory_core.cognition.directive_models import DirectiveBlockInput, DirectiveBlockOutput
from memory_core.cognition.offline.directives import OfflineDirectiveBlockSkill, compose_block
from memory_core.cognition.skill import Skill
from memory_core.config import MemoryConfig
from memory_core.db.statements import sql
from memory_core.providers.errors import ProviderError
from memory_core.providers.protocols import TokenUsage
from memory_core.read.compress import estimate_tokens
from memory_core.read.schemas import DirectiveBlock, DirectiveOut

__all__ = [
    "CONFIDENCE_FLOOR",
    "WEEKLY_DECAY",
    "DirectiveBlock",
    "DirectiveOut",
    "delete_directive",
    "directive_block",
    "effective_confidence",
    "invalidate_directive_cache",
    "list_directives",
]

WEEKLY_DECAY = 0.95
CONFIDENCE_FLOOR = 0.10
_WEEK_S = 7 * 24 * 3600.0
_OFFLINE_COMPOSER = OfflineDirectiveBlockSkill()

UsageReport = Callable[[str, TokenUsage, bool], None]


def effective_confidence(base_confidence: float, since: datetime, now: datetime | None = None) -> float:
    """``base_confidence * 0.95 ** weeks`` since ``since`` (fractional weeks), floored at 0.10."""
    moment = now or datetime.now(UTC)
    weeks = max(0.0, (moment - since).total_seconds() / _WEEK_S)
    decayed: float = base_confidence * WEEKLY_DECAY**weeks
    return max(CONFIDENCE_FLOOR, decayed)


_LIST = sql(
    "SELECT id, text, confidence, times_reinforced, is_active, learned_at, last_reinforced_at, source_event_id, "
    "superseded_by_id, supersession_reason FROM memory_directives "
    "WHERE agent_id = :agent AND (is_active OR :inactive) ORDER BY learned_at DESC, id"
)


def list_directives(
    session: Session, agent_id: str, *, include_inactive: bool = False, now: datetime | None = None
) -> list[DirectiveOut]:
    """The agent's directives, active ones by effective confidence (strongest first), then superseded ones."""
    moment = now or datetime.now(UTC)
    rows = session.execute(_LIST, {"agent": agent_id, "inactive": include_inactive}).all()
    out = [
        DirectiveOut(
            directive_id=str(row.id),
            text=row.text,
            confidence=float(row.confidence),
            effective_confidence=round(effective_confidence(float(row.confidence), row.last_reinforced_at, moment), 4),
            times_reinforced=int(row.times_reinforced),
            is_active=bool(row.is_active),
            learned_at=row.learned_at,
            last_reinforced_at=row.last_reinforced_at,
            source_event_id=str(row.source_event_id) if row.source_event_id else None,
            superseded_by_id=str(row.superseded_by_id) if row.superseded_by_id else None,
            supersession_reason=row.supersession_reason,
        )
        for row in rows
    ]
    # Stable: equal confidences keep the newest first.
    out.sort(key=lambda item: (not item.is_active, -item.effective_confidence))
    return out


def _cache_key(persona: str, max_tokens: int, directives: list[DirectiveOut]) -> str:
    identity = sorted((item.directive_id, item.times_reinforced) for item in directives)
    blob = json.dumps([persona.strip(), max_tokens, identity], separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


_CACHED = sql(
    "SELECT text, directive_count FROM memory_directive_blocks WHERE agent_id = :agent AND cache_key = :key "
    "AND created_at > now() - make_interval(mins => :ttl)"
)
_STORE = sql(
    "INSERT INTO memory_directive_blocks (agent_id, cache_key, text, directive_count) "
    "VALUES (:agent, :key, :text, :count) ON CONFLICT (agent_id, cache_key) DO UPDATE SET "
    "text = EXCLUDED.text, directive_count = EXCLUDED.directive_count, created_at = now()"
)
# Keys of directive sets that no longer exist are never asked for again; they go once expired.
_PRUNE = sql(
    "DELETE FROM memory_directive_blocks WHERE agent_id = :agent AND created_at <= now() - make_interval(mins => :ttl)"
)
_INVALIDATE = sql("DELETE FROM memory_directive_blocks WHERE agent_id = :agent")
_DELETE = sql("DELETE FROM memory_directives WHERE id = :id AND agent_id = :agent RETURNING id")


@dataclass(frozen=True)
class _Composed:
    text: str
    usage: TokenUsage
    failed: bool


def _compose(
    composer: Skill[DirectiveBlockInput, DirectiveBlockOutput] | None,
    persona: str,
    texts: list[str],
    max_tokens: int,
) -> _Composed:
    skill = composer or _OFFLINE_COMPOSER
    request = DirectiveBlockInput(persona=persona, directives=texts, max_tokens=max_tokens)
    try:
        outcome = skill.run(request)
    except ProviderError:
        # Seeds: fail-safe, an empty block rather than a failed retrieval.
        return _Composed("", TokenUsage(), True)
    text = outcome.output.text.strip()
    if estimate_tokens(text) > max_tokens:
        # Over budget: the rule twin's block always fits.
        text = compose_block(persona, texts, max_tokens)
    return _Composed(text, outcome.usage, outcome.used_fallback)


def directive_block(
    sessions: sessionmaker[Session],
    agent_id: str,
    config: MemoryConfig,
    *,
    composer: Skill[DirectiveBlockInput, DirectiveBlockOutput] | None = None,
    persona: str = "",
    report_usage: UsageReport | None = None,
) -> DirectiveBlock:
    """The agent's directive block (see the module docstring); never holds a transaction across the model call."""
    ttl = config.directive_cache_ttl_minutes
    with sessions() as session:
        active = list_directives(session, agent_id)
        key = _cache_key(persona, config.directive_max_tokens, active)
        if ttl > 0:
            hit = session.execute(_CACHED, {"agent": agent_id, "key": key, "ttl": ttl}).one_or_none()
            if hit is not None:
                session.commit()
                return DirectiveBlock(text=hit.text, directive_count=int(hit.directive_count), cache_hit=True)
        session.commit()
    if not active and not persona.strip():
        return DirectiveBlock()
    composed = _compose(composer, persona, [item.text for item in active], config.directive_max_tokens)
    if report_usage is not None and (composed.usage.calls or composed.failed):
        report_usage(composer.name if composer else _OFFLINE_COMPOSER.name, composed.usage, composed.failed)
    block = DirectiveBlock(text=composed.text, directive_count=len(active) if composed.text else 0)
    if ttl > 0 and composed.text:
        with sessions.begin() as session:
            session.execute(_PRUNE, {"agent": agent_id, "ttl": ttl})
            session.execute(_STORE, {"agent": agent_id, "key": key, "text": block.text, "count": block.directive_count})
    return block


def invalidate_directive_cache(session: Session, agent_id: str) -> int:
    """Forget every cached block of ``agent_id`` (in the caller's transaction); the rows removed."""
    result = session.execute(_INVALIDATE, {"agent": agent_id})
    return int(getattr(result, "rowcount", 0) or 0)


def delete_directive(session: Session, agent_id: str, directive_id: uuid.UUID) -> bool:
    """Delete one directive of ``agent_id`` for good, and its cached blocks; False when it does not exist."""
    gone = session.execute(_DELETE, {"id": directive_id, "agent": agent_id}).scalar()
    if gone is None:
        return False
    invalidate_directive_cache(session, agent_id)
    return True
