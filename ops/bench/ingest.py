"""The ingest benchmark: ``python -m ops.bench ingest [--quick]`` (or ``./ops/bench/ingest``).

Four phases on the real stack (see :class:`~ops.bench.common.BenchStack`):

1. **End to end, offline skills** (the defaults: no LLM key), on a clean stack first: 2,000
   chat messages over 50 agents, one batch per agent; waits until every run is done or
   failed and reads throughput and received->done latency from ``pipeline_runs``.
2. **API acceptance** with the workers running: single ``POST .../messages`` latency under 32
   concurrent keep-alive clients, then messages/s accepted through ``.../messages/batch``.
3. **End to end against an OpenAI-compatible stub** answering after 500 ms, on a fresh
   database, with 64 ingest threads: throughput and LLM calls per message.
4. **Historical import** of the LoCoMo sample through ``POST .../imports``: wall time until
   every import has nothing pending.

Peak stack memory (PSS) is reported beside each phase, and the idle memory after start-up.
``--quick`` runs every phase at a tenth of the size.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import os
import random
import re
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import uvloop

from ops.bench.common import (
    BENCHMARK_ROLE,
    GIB,
    SHARED_DATA,
    TOP_STATEMENTS_TITLE,
    BenchStack,
    CpuSnapshot,
    MachineInfo,
    MemorySampler,
    StatementStats,
    append_results,
    checkout,
    machine_info,
    markdown_table,
    mib,
    ms,
    percentile,
    secs,
    shielded,
    stack_cpu_label,
    statements_block,
    text_table,
    verdict,
)
from ops.bench.http_load import send_all

LOCOMO_PATH = SHARED_DATA / "locomo" / "locomo_dev5.json"

IDLE_BUDGET_BYTES = int(1.5 * GIB)
PEAK_BUDGET_BYTES = int(2.5 * GIB)

TARGET_E2E_RATE = 100.0
TARGET_E2E_P95_S = 5.0
TARGET_API_P95_S = 0.025
TARGET_BATCH_RATE = 2_000.0
TARGET_LLM_RATE = 40.0
TARGET_LLM_CALLS_PER_INFORMATIVE = 1.3

STUB_LATENCY_S = 0.5
LLM_INGEST_CONCURRENCY = 64
LLM_SETTINGS = {
    "ARANDU_LLM_PROVIDER": "openai",
    "ARANDU_LLM_API_KEY": "bench",
    "ARANDU_EMBEDDING_PROVIDER": "hashing",
    "ARANDU_EMBEDDING_DIMENSIONS": "384",
    "ARANDU_INGEST_CONCURRENCY": str(LLM_INGEST_CONCURRENCY),
}
POLL_INTERVAL_S = 0.5
# Above this share of a core used by processes outside the stack, a phase's figures are flagged.
FOREIGN_LOAD_WARNING = 0.15
PROGRESS_EVERY_S = 5.0


# =====================================================================================
# Realistic chat lines
# =====================================================================================


@dataclass(frozen=True)
class FactNote:
    """A fact a careful model would extract from one sentence, in the message's language."""

    subject: str
    text: str
    attribute_key: str | None
    category: str
    action: str = "NEW"


@dataclass(frozen=True)
class Annotation:
    """What a message really says: entities (speaker included), facts, a relation, its tone."""

    entities: tuple[tuple[str, str], ...]
    facts: tuple[FactNote, ...]
    relation: tuple[str, str, str] | None
    emotion: tuple[str, float, str]


@dataclass(frozen=True)
class ChatLine:
    """One message to send, and whether it carries new information (ground truth of the generator)."""

    agent_id: str
    speaker: str
    text: str
    session_id: str
    message_id: str
    informative: bool

    def body(self) -> dict[str, Any]:
        """The message as the API takes it."""
        return {
            "message": self.text,
            "speaker_name": self.speaker,
            "session_id": self.session_id,
            "message_id": self.message_id,
        }


@dataclass(frozen=True)
class Template:
    """A message pattern. ``facts``: (subject slot, fact text, attribute key, category) per informative sentence."""

    text: str
    facts: tuple[tuple[str, str, str | None, str], ...]
    entities: tuple[tuple[str, str], ...] = ()
    relation: tuple[str, str, str] | None = None
    emotion: tuple[str, float, str] = ("neutral", 0.1, "medium")
    once: bool = False
    after: str | None = None
    action: str = "NEW"
    name: str = ""


def _t(name: str, text: str, *facts: tuple[str, str, str | None, str], **options: Any) -> Template:
    return Template(text=text, facts=tuple(facts), name=name, **options)


EN_TEMPLATES: tuple[Template, ...] = (
    _t(
        "residence",
        "I live in {city}, close to the river.",
        ("me", "{me} lives in {city}.", "location.residence", "stable_preference"),
        entities=(("city", "place"),),
        relation=("me", "city", "lives_in"),
        once=True,
    ),
    _t(
        "employer",
        "I work at {company} as a {job}. The team there is great.",
        ("me", "{me} works at {company} as a {job}.", "work.employer", "relationship_change"),
        ("me", "{me} likes the team at {company}.", "preference.like", "stable_preference"),
        entities=(("company", "organization"),),
        relation=("me", "company", "works_at"),
        emotion=("contentment", 0.4, "medium"),
        once=True,
    ),
    _t(
        "hometown",
        "I grew up in {hometown} but moved away for college.",
        ("me", "{me} grew up in {hometown}.", "location.hometown", "biographical_milestone"),
        entities=(("hometown", "place"),),
        relation=("me", "hometown", "from"),
        once=True,
    ),
    _t(
        "age",
        "I'm turning {age} next week, feeling old haha.",
        ("me", "{me} is turning {age}.", "personal.age", "biographical_milestone"),
        emotion=("amusement", 0.3, "medium"),
        once=True,
    ),
    _t(
        "partner",
        "My partner {partner} and I are planning a trip to {trip_city} next month.",
        ("me", "{partner} is the partner of {me}.", "relationship.partner", "relationship_change"),
        ("me", "{me} and {partner} are planning a trip to {trip_city}.", "goal.plan", "specific_event"),
        entities=(("partner", "person"), ("trip_city", "place")),
        relation=("me", "partner", "partner_of"),
        emotion=("excitement", 0.6, "high"),
        once=True,
    ),
    _t(
        "sibling",
        "My {sibling_word} {sibling} just started a new job at {sibling_company}.",
        ("sibling", "{sibling} is the {sibling_word} of {me}.", "family.sibling", "stable_preference"),
        ("sibling", "{sibling} started working at {sibling_company}.", "work.employer", "relationship_change"),
        entities=(("sibling", "person"), ("sibling_company", "organization")),
        relation=("sibling", "sibling_company", "works_at"),
        emotion=("pride", 0.5, "medium"),
        once=True,
    ),
    _t(
        "allergy",
        "I'm allergic to peanuts, so I always check the labels.",
        ("me", "{me} is allergic to peanuts.", "health.condition", "stable_preference"),
        once=True,
    ),
    _t(
        "pet",
        "My {pet_kind} {pet} learned a new trick today!",
        ("me", "{me} has a {pet_kind} named {pet}.", "pet", "stable_preference"),
        entities=(("pet", "pet"),),
        relation=("me", "pet", "owns"),
        emotion=("joy", 0.7, "high"),
    ),
    _t(
        "hobby",
        "I've been really into {hobby} lately.",
        ("me", "{me} enjoys {hobby}.", "preference.like", "stable_preference"),
        emotion=("enthusiasm", 0.5, "medium"),
    ),
    _t(
        "food",
        "Honestly I could eat {food} every single day.",
        ("me", "{me} loves {food}.", "preference.like", "stable_preference"),
        emotion=("joy", 0.4, "medium"),
    ),
    _t(
        "friend",
        "My best friend {friend} is visiting from {friend_city} this weekend.",
        ("friend", "{friend} is the best friend of {me}.", "relationship.friend", "stable_preference"),
        ("friend", "{friend} lives in {friend_city}.", "location.residence", "stable_preference"),
        entities=(("friend", "person"), ("friend_city", "place")),
        relation=("me", "friend", "friend_of"),
        emotion=("excitement", 0.6, "high"),
    ),
    _t(
        "weekend",
        "Last weekend I went {activity} with {friend}.",
        ("me", "{me} went {activity} with {friend}.", "event.activity", "specific_event"),
        entities=(("friend", "person"),),
        emotion=("joy", 0.5, "medium"),
    ),
    _t(
        "deadline",
        "I'm so stressed about the release at {company} on Friday.",
        ("me", "{me} has a release at {company} on Friday.", "event.activity", "specific_event"),
        entities=(("company", "organization"),),
        emotion=("anxiety", 0.7, "high"),
    ),
    _t(
        "language",
        "I'm learning {language} every morning before work.",
        ("me", "{me} is learning {language}.", "goal.plan", "routine_activity"),
        emotion=("determination", 0.4, "medium"),
    ),
    _t(
        "move",
        "Big news: I'm moving to {new_city} in the spring!",
        ("me", "{me} is moving to {new_city}.", "location.residence", "relationship_change"),
        entities=(("new_city", "place"),),
        relation=("me", "new_city", "lives_in"),
        emotion=("excitement", 0.8, "high"),
        once=True,
        after="residence",
        action="UPDATE",
    ),
    _t(
        "new_job",
        "I just accepted an offer from {new_company}! I start in two weeks.",
        ("me", "{me} accepted a job at {new_company}.", "work.employer", "relationship_change"),
        ("me", "{me} starts at {new_company} in two weeks.", "event.activity", "specific_event"),
        entities=(("new_company", "organization"),),
        relation=("me", "new_company", "works_at"),
        emotion=("excitement", 0.9, "high"),
        once=True,
        after="employer",
        action="UPDATE",
    ),
)

PT_TEMPLATES: tuple[Template, ...] = (
    _t(
        "residence",
        "Eu moro em {city}, perto do centro.",
        ("me", "{me} mora em {city}.", "location.residence", "stable_preference"),
        entities=(("city", "place"),),
        relation=("me", "city", "lives_in"),
        once=True,
    ),
    _t(
        "employer",
        "Trabalho na {company} como {job}. A equipe lá é ótima.",
        ("me", "{me} trabalha na {company} como {job}.", "work.employer", "relationship_change"),
        ("me", "{me} gosta da equipe da {company}.", "preference.like", "stable_preference"),
        entities=(("company", "organization"),),
        relation=("me", "company", "works_at"),
        emotion=("contentment", 0.4, "medium"),
        once=True,
    ),
    _t(
        "hometown",
        "Cresci em {hometown}, mas saí de lá pra fazer faculdade.",
        ("me", "{me} cresceu em {hometown}.", "location.hometown", "biographical_milestone"),
        entities=(("hometown", "place"),),
        relation=("me", "hometown", "from"),
        once=True,
    ),
    _t(
        "age",
        "Faço {age} anos semana que vem, tô ficando velho kkk.",
        ("me", "{me} vai fazer {age} anos.", "personal.age", "biographical_milestone"),
        emotion=("amusement", 0.3, "medium"),
        once=True,
    ),
    _t(
        "partner",
        "Eu e {partner_poss} {partner_word} {partner} vamos viajar pra {trip_city} mês que vem.",
        ("me", "{partner} é {partner_word} de {me}.", "relationship.partner", "relationship_change"),
        ("me", "{me} e {partner} vão viajar para {trip_city}.", "goal.plan", "specific_event"),
        entities=(("partner", "person"), ("trip_city", "place")),
        relation=("me", "partner", "partner_of"),
        emotion=("excitement", 0.6, "high"),
        once=True,
    ),
    _t(
        "sibling",
        "{sibling_poss_cap} {sibling_word} {sibling} começou a trabalhar na {sibling_company}.",
        ("sibling", "{sibling} é {sibling_word} de {me}.", "family.sibling", "stable_preference"),
        ("sibling", "{sibling} começou a trabalhar na {sibling_company}.", "work.employer", "relationship_change"),
        entities=(("sibling", "person"), ("sibling_company", "organization")),
        relation=("sibling", "sibling_company", "works_at"),
        emotion=("pride", 0.5, "medium"),
        once=True,
    ),
    _t(
        "allergy",
        "Tenho alergia a camarão, então sempre pergunto no restaurante.",
        ("me", "{me} tem alergia a camarão.", "health.condition", "stable_preference"),
        once=True,
    ),
    _t(
        "pet",
        "{pet_poss_cap} {pet_kind} {pet} aprendeu um truque novo hoje!",
        ("me", "{me} tem {pet_art} {pet_kind} {pet_called} {pet}.", "pet", "stable_preference"),
        entities=(("pet", "pet"),),
        relation=("me", "pet", "owns"),
        emotion=("joy", 0.7, "high"),
    ),
    _t(
        "hobby",
        "Ultimamente ando viciado em {hobby}.",
        ("me", "{me} gosta de {hobby}.", "preference.like", "stable_preference"),
        emotion=("enthusiasm", 0.5, "medium"),
    ),
    _t(
        "food",
        "Sinceramente eu comeria {food} todo santo dia.",
        ("me", "{me} adora {food}.", "preference.like", "stable_preference"),
        emotion=("joy", 0.4, "medium"),
    ),
    _t(
        "friend",
        "{friend_poss_cap} melhor {friend_word} {friend} vem de {friend_city} nesse fim de semana.",
        ("friend", "{friend} é {friend_best} de {me}.", "relationship.friend", "stable_preference"),
        ("friend", "{friend} mora em {friend_city}.", "location.residence", "stable_preference"),
        entities=(("friend", "person"), ("friend_city", "place")),
        relation=("me", "friend", "friend_of"),
        emotion=("excitement", 0.6, "high"),
    ),
    _t(
        "weekend",
        "No fim de semana passado fui {activity} com {friend}.",
        ("me", "{me} foi {activity} com {friend}.", "event.activity", "specific_event"),
        entities=(("friend", "person"),),
        emotion=("joy", 0.5, "medium"),
    ),
    _t(
        "deadline",
        "Tô muito estressado com a entrega na {company} na sexta.",
        ("me", "{me} tem uma entrega na {company} na sexta-feira.", "event.activity", "specific_event"),
        entities=(("company", "organization"),),
        emotion=("anxiety", 0.7, "high"),
    ),
    _t(
        "language",
        "Tô aprendendo {language} toda manhã antes do trabalho.",
        ("me", "{me} está aprendendo {language}.", "goal.plan", "routine_activity"),
        emotion=("determination", 0.4, "medium"),
    ),
    _t(
        "move",
        "Novidade: vou me mudar pra {new_city} no começo do ano!",
        ("me", "{me} vai se mudar para {new_city}.", "location.residence", "relationship_change"),
        entities=(("new_city", "place"),),
        relation=("me", "new_city", "lives_in"),
        emotion=("excitement", 0.8, "high"),
        once=True,
        after="residence",
        action="UPDATE",
    ),
    _t(
        "new_job",
        "Aceitei uma proposta da {new_company}! Começo em duas semanas.",
        ("me", "{me} aceitou um emprego na {new_company}.", "work.employer", "relationship_change"),
        ("me", "{me} começa na {new_company} em duas semanas.", "event.activity", "specific_event"),
        entities=(("new_company", "organization"),),
        relation=("me", "new_company", "works_at"),
        emotion=("excitement", 0.9, "high"),
        once=True,
        after="employer",
        action="UPDATE",
    ),
)

# Small talk: (text, emotion) — nothing worth remembering.
EN_SMALL_TALK: tuple[tuple[str, tuple[str, float, str]], ...] = (
    ("Hey, how's it going?", ("neutral", 0.2, "medium")),
    ("Good morning!", ("joy", 0.3, "medium")),
    ("Thanks, that helps a lot!", ("gratitude", 0.6, "medium")),
    ("Haha that's funny.", ("amusement", 0.5, "medium")),
    ("Ok, talk to you later.", ("neutral", 0.1, "low")),
    ("Hmm, let me think about it.", ("neutral", 0.1, "low")),
    ("What's the weather like today?", ("neutral", 0.1, "medium")),
    ("lol yes exactly", ("amusement", 0.4, "medium")),
    ("Sounds good to me.", ("neutral", 0.2, "medium")),
    ("Ugh, Mondays...", ("frustration", 0.4, "low")),
    ("Can you give me a quick summary?", ("neutral", 0.1, "medium")),
    ("Nice, good to know.", ("neutral", 0.2, "medium")),
)
PT_SMALL_TALK: tuple[tuple[str, tuple[str, float, str]], ...] = (
    ("Oi, tudo bem?", ("neutral", 0.2, "medium")),
    ("Bom dia!", ("joy", 0.3, "medium")),
    ("Valeu, ajudou muito!", ("gratitude", 0.6, "medium")),
    ("Kkkk verdade", ("amusement", 0.4, "medium")),
    ("Beleza, falamos depois.", ("neutral", 0.1, "low")),
    ("Hmm, deixa eu pensar.", ("neutral", 0.1, "low")),
    ("Como vai estar o tempo hoje?", ("neutral", 0.1, "medium")),
    ("Pois é, né.", ("neutral", 0.1, "low")),
    ("Show, pode ser.", ("neutral", 0.2, "medium")),
    ("Aff, segunda-feira de novo...", ("frustration", 0.4, "low")),
    ("Me faz um resumo rapidinho?", ("neutral", 0.1, "medium")),
    ("Legal, bom saber.", ("neutral", 0.2, "medium")),
)
# Assistant replies by the mood of the user's last line.
EN_ASSISTANT: dict[str, tuple[str, ...]] = {
    "happy": (
        "That sounds wonderful! How long have you been doing that?",
        "Congratulations, that's great news!",
        "Love that! Tell me more.",
    ),
    "sad": ("Oh no, I'm sorry to hear that. Is there anything I can do?", "That sounds tough. Hang in there!"),
    "question": ("Sure, here's a quick summary of what we discussed.", "Good question, let me check."),
    "neutral": ("Got it, I'll keep that in mind.", "Happy to help! Anything else on your mind?", "Interesting!"),
}
PT_ASSISTANT: dict[str, tuple[str, ...]] = {
    "happy": (
        "Que legal! Faz quanto tempo que você faz isso?",
        "Parabéns, que notícia ótima!",
        "Adorei! Me conta mais.",
    ),
    "sad": ("Poxa, sinto muito. Posso ajudar em algo?", "Que fase, hein. Força!"),
    "question": ("Claro, aqui vai um resumo do que conversamos.", "Boa pergunta, deixa eu ver."),
    "neutral": ("Entendi, vou lembrar disso.", "Fico feliz em ajudar! Mais alguma coisa?", "Interessante!"),
}
_HAPPY = frozenset({"joy", "excitement", "pride", "enthusiasm", "contentment", "amusement", "gratitude"})
_SAD = frozenset({"anxiety", "frustration", "sadness"})


def _mood(text: str, annotation: Annotation | None) -> str:
    if text.rstrip().endswith("?"):
        return "question"
    emotion = annotation.emotion[0] if annotation else "neutral"
    if emotion in _HAPPY:
        return "happy"
    return "sad" if emotion in _SAD else "neutral"


EN_PREFIXES = ("", "", "", "Btw, ", "Oh, ", "So, ", "Guess what, ", "Fun fact: ")
PT_PREFIXES = ("", "", "", "Aliás, ", "Ah, ", "Então, ", "Sabia que ", "Olha só: ")

EN_NAMES_F = ("Alice", "Chloe", "Emma", "Grace", "Isla", "Kate", "Mia", "Olivia", "Ruby", "Tara", "Wendy", "Zoe")
EN_NAMES_M = ("Ben", "Daniel", "Frank", "Henry", "Jack", "Liam", "Noah", "Peter", "Sam", "Victor", "Oscar", "Quinn")
PT_NAMES_F = ("Ana", "Camila", "Eduarda", "Gabriela", "Isabela", "Larissa", "Natália", "Paula", "Sofia", "Vitória")
PT_NAMES_M = ("Bruno", "Diego", "Felipe", "Henrique", "João", "Marcos", "Otávio", "Rafael", "Thiago", "Lucas")
EN_CITIES = (
    "Seattle", "Austin", "Boston", "Denver", "Chicago", "Toronto", "Dublin", "London", "Manchester",
    "Portland", "Edinburgh", "Vancouver", "San Diego", "Melbourne",
)  # fmt: skip
PT_CITIES = (
    "Curitiba", "Recife", "Porto Alegre", "Belo Horizonte", "Florianópolis", "Salvador", "Lisboa", "Porto",
    "Campinas", "Fortaleza", "Goiânia", "Manaus", "Niterói", "Coimbra",
)  # fmt: skip
COMPANIES = (
    "Acme Robotics", "Globex", "Initech", "Nubank", "Stone", "Totvs", "Embraer", "Shopify", "Contoso",
    "Umbrella Labs", "Natura", "Vale", "Hooli", "Pied Piper", "Wayne Enterprises", "Magalu",
)  # fmt: skip
EN_JOBS = ("software engineer", "nurse", "teacher", "product designer", "accountant", "chef", "data analyst")
PT_JOBS = ("desenvolvedor", "enfermeiro", "professor", "designer de produto", "contador", "chef", "analista de dados")
EN_HOBBIES = (
    "rock climbing", "baking sourdough", "playing chess", "surfing", "watercolor painting",
    "running", "playing the guitar", "birdwatching", "pottery", "board games",
)  # fmt: skip
PT_HOBBIES = (
    "escalada", "fazer pão caseiro", "xadrez", "surfe", "pintura em aquarela", "corrida",
    "tocar violão", "observar pássaros", "cerâmica", "jogos de tabuleiro",
)  # fmt: skip
EN_FOODS = ("sushi", "ramen", "tacos", "pizza", "pad thai", "lasagna", "pho")
PT_FOODS = ("feijoada", "pão de queijo", "moqueca", "açaí", "coxinha", "churrasco", "tapioca")
EN_PETS = (("dog", ("Biscuit", "Max", "Rex")), ("cat", ("Luna", "Milo", "Nala")), ("parrot", ("Kiwi", "Rio")))
# (kind, possessive, article, "called", names)
PT_PETS = (
    ("cachorro", "meu", "um", "chamado", ("Thor", "Paçoca", "Bob")),
    ("gata", "minha", "uma", "chamada", ("Mel", "Nina", "Pipoca")),
    ("papagaio", "meu", "um", "chamado", ("Louro", "Zeca")),
)
EN_ACTIVITIES = ("hiking", "camping", "to a concert", "fishing", "to the beach", "kayaking")
PT_ACTIVITIES = ("fazer trilha", "acampar", "num show", "pescar", "pra praia", "andar de caiaque")
EN_LANGUAGES = ("Spanish", "Japanese", "German", "Italian", "Portuguese")
PT_LANGUAGES = ("inglês", "espanhol", "japonês", "alemão", "italiano")


def _persona(rng: random.Random, lang: str) -> tuple[str, dict[str, Any]]:
    """A speaker and the slot values their messages use."""
    if lang == "en":
        names = [*EN_NAMES_F, *EN_NAMES_M]
        rng.shuffle(names)
        me, partner, sibling, *friends = names[:6]
        cities = rng.sample(EN_CITIES, 6)
        kind, pet_names = rng.choice(EN_PETS)
        slots: dict[str, Any] = {
            "job": rng.choice(EN_JOBS),
            "pet_kind": kind,
            "pets": [rng.choice(pet_names)],
            "hobbies": rng.sample(EN_HOBBIES, 3),
            "foods": rng.sample(EN_FOODS, 2),
            "activities": list(EN_ACTIVITIES),
            "language": rng.choice(EN_LANGUAGES),
            "sibling_word": "sister" if sibling in EN_NAMES_F else "brother",
        }
    else:
        female = rng.random() < 0.5
        pool_me = PT_NAMES_F if female else PT_NAMES_M
        me = rng.choice(pool_me)
        partner_female = rng.random() < 0.5
        partner = rng.choice([n for n in (PT_NAMES_F if partner_female else PT_NAMES_M) if n != me])
        sibling_female = rng.random() < 0.5
        sibling = rng.choice([n for n in (PT_NAMES_F if sibling_female else PT_NAMES_M) if n not in (me, partner)])
        friend_female = rng.random() < 0.5
        pool_friend = [n for n in (PT_NAMES_F if friend_female else PT_NAMES_M) if n not in (me, partner, sibling)]
        friends = rng.sample(pool_friend, 2)
        cities = rng.sample(PT_CITIES, 6)
        kind, poss, art, called, pet_names = rng.choice(PT_PETS)
        slots = {
            "job": rng.choice(PT_JOBS),
            "pet_kind": kind,
            "pet_poss_cap": poss.capitalize(),
            "pet_art": art,
            "pet_called": called,
            "pets": [rng.choice(pet_names)],
            "hobbies": rng.sample(PT_HOBBIES, 3),
            "foods": rng.sample(PT_FOODS, 2),
            "activities": list(PT_ACTIVITIES),
            "language": rng.choice(PT_LANGUAGES),
            "partner_poss": "minha" if partner_female else "meu",
            "partner_word": "namorada" if partner_female else "namorado",
            "sibling_poss_cap": "Minha" if sibling_female else "Meu",
            "sibling_word": "irmã" if sibling_female else "irmão",
            "friend_poss_cap": "Minha" if friend_female else "Meu",
            "friend_word": "amiga" if friend_female else "amigo",
            "friend_best": "a melhor amiga" if friend_female else "o melhor amigo",
        }
    companies = rng.sample(COMPANIES, 3)
    slots.update(
        {
            "me": me,
            "partner": partner,
            "sibling": sibling,
            "friends": friends[:2],
            "city": cities[0],
            "new_city": cities[1],
            "hometown": cities[2],
            "friend_city": cities[3],
            "trip_cities": cities[4:6],
            "company": companies[0],
            "new_company": companies[1],
            "sibling_company": companies[2],
            "age": rng.randint(24, 61),
        }
    )
    return me, slots


class ChatGenerator:
    """Deterministic, varied English/Portuguese chat conversations, with what each message says.

    ``annotations`` maps (speaker, text) to the ground truth the LLM stub answers with, so
    the stub behaves like a model that understands the message.
    """

    def __init__(self, seed: int = 7) -> None:
        self.seed = seed
        self.annotations: dict[tuple[str, str], Annotation] = {}
        self._lock = threading.Lock()

    def conversation(self, agent_id: str, count: int, *, pt_share: float = 0.35) -> list[ChatLine]:
        """``count`` messages of one user (and the assistant) talking with the agent ``agent_id``."""
        rng = random.Random(f"{self.seed}:{agent_id}")  # noqa: S311 - test data, not cryptography
        lang = "pt" if rng.random() < pt_share else "en"
        me, slots = _persona(rng, lang)
        templates = EN_TEMPLATES if lang == "en" else PT_TEMPLATES
        small_talk = EN_SMALL_TALK if lang == "en" else PT_SMALL_TALK
        assistant = EN_ASSISTANT if lang == "en" else PT_ASSISTANT
        prefixes = EN_PREFIXES if lang == "en" else PT_PREFIXES
        said: set[str] = set()
        lines: list[ChatLine] = []
        session = 1
        while len(lines) < count:
            if lines and len(lines) % 15 == 0:
                session += 1
            if lines and lines[-1].speaker == me and rng.random() < 0.45:
                text = rng.choice(assistant[_mood(lines[-1].text, self.lookup(me, lines[-1].text))])
                self._note("assistant", text, Annotation((), (), None, ("neutral", 0.2, "medium")))
                lines.append(self._line(agent_id, "assistant", text, session, len(lines), informative=False))
                continue
            if rng.random() < 0.3:
                text, emotion = rng.choice(small_talk)
                self._note(me, text, Annotation((), (), None, emotion))
                lines.append(self._line(agent_id, me, text, session, len(lines), informative=False))
                continue
            available = [
                t for t in templates if not (t.once and t.name in said) and (t.after is None or t.after in said)
            ]
            template = rng.choice(available)
            said.add(template.name)
            values = dict(slots)
            values["hobby"] = rng.choice(slots["hobbies"])
            values["food"] = rng.choice(slots["foods"])
            values["friend"] = rng.choice(slots["friends"])
            values["trip_city"] = rng.choice(slots["trip_cities"])
            values["activity"] = rng.choice(slots["activities"])
            values["pet"] = slots["pets"][0]
            text = template.text.format(**values)
            prefix = rng.choice(prefixes)
            if prefix:
                text = prefix + (text if text.startswith(("I ", "I'")) else text[:1].lower() + text[1:])
            if rng.random() < 0.08:
                text += " 😊"
            self._note(me, text, _annotate(template, values, me))
            lines.append(self._line(agent_id, me, text, session, len(lines), informative=True))
        return lines

    def _note(self, speaker: str, text: str, annotation: Annotation) -> None:
        with self._lock:
            self.annotations[(speaker, text)] = annotation

    @staticmethod
    def _line(agent_id: str, speaker: str, text: str, session: int, index: int, *, informative: bool) -> ChatLine:
        return ChatLine(
            agent_id=agent_id,
            speaker=speaker,
            text=text,
            session_id=f"s{session}",
            message_id=f"{agent_id}-m{index:05d}",
            informative=informative,
        )

    def lookup(self, speaker: str, text: str) -> Annotation | None:
        """The ground truth of a message, if this generator wrote it."""
        with self._lock:
            found = self.annotations.get((speaker, text))
            if found is None:
                found = self.annotations.get((speaker, " ".join(text.split())))
        return found


def _annotate(template: Template, values: dict[str, Any], me: str) -> Annotation:
    def name_of(slot: str) -> str:
        return me if slot == "me" else str(values[slot])

    entities: list[tuple[str, str]] = [(me, "person")]
    entities.extend((str(values[slot]), kind) for slot, kind in template.entities if str(values[slot]) != me)
    facts = tuple(
        FactNote(
            subject=name_of(subject),
            text=text.format(**values),
            attribute_key=key,
            category=category,
            action=template.action if index == 0 else "NEW",
        )
        for index, (subject, text, key, category) in enumerate(template.facts)
    )
    relation = None
    if template.relation is not None:
        source, target, kind = template.relation
        relation = (name_of(source), name_of(target), kind)
    return Annotation(tuple(dict.fromkeys(entities)), facts, relation, template.emotion)


# =====================================================================================
# The LLM stub's brain: answers like a model that understood the message
# =====================================================================================

_SPEAKER_LINE = re.compile(r"^Speaker: (?P<speaker>.+)$", re.MULTILINE)
_MESSAGE_BLOCK = re.compile(r"<message>\n(?P<text>.*)\n</message>", re.DOTALL)
_PROFILE_LINE = re.compile(
    r'^- (?P<name>.+?) \([^)]*\)(?:, called "[^"]*" in the message)?\. Profile: (?P<profile>.+)$'
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_KNOWN_LABEL = re.compile(r"^- (?P<name>.+?) \([^)]*\)")
_KNOWN_FACT = re.compile(r"^#(?P<number>\d+) (?P<text>.*?)(?: \((?P<key>[a-z_.]+)\))?$")
_BATCH_SECTION = re.compile(r"^### Message (\d+)$", re.MULTILINE)
_BATCH_FACT = re.compile(r"^### Fact (\d+)$", re.MULTILINE)

PROMPT_KINDS = (
    ("You turn one chat message", "extract_informed"),
    ("You turn several consecutive messages", "extract_batch"),
    ("You list the entities", "extract_blind.entities"),
    ("You write down what one chat message", "extract_blind.facts"),
    ("You find the relations", "extract_blind.relations"),
    ("You keep one entity's memory", "reconcile"),
    ("You keep an agent's memory", "reconcile_batch"),
    ("You decide whether a name", "disambiguate"),
    ("You tag the emotional tone", "emotion"),
)


def prompt_kind(system: str) -> str:
    """Which skill sent a chat request, from its system prompt."""
    for prefix, kind in PROMPT_KINDS:
        if system.startswith(prefix):
            return kind
    return "other"


def _generic_annotation(speaker: str, text: str) -> Annotation:
    """For a message the generator did not write: one fact per sentence, first person -> the speaker."""
    facts = []
    for sentence in _SENTENCE_END.split(text.strip()):
        cleaned = sentence.strip()
        if len(cleaned.split()) < 4:
            continue
        rewritten = re.sub(r"\b(I|I'm|me|eu)\b", speaker, cleaned, flags=re.IGNORECASE)
        rewritten = re.sub(r"\b(my|meu|minha)\b", f"{speaker}'s", rewritten, flags=re.IGNORECASE)
        if speaker not in rewritten:
            rewritten = f"{speaker} said: {rewritten}"
        facts.append(FactNote(speaker, rewritten, None, "conversational"))
    entities = ((speaker, "person"),) if facts else ()
    return Annotation(entities, tuple(facts), None, ("neutral", 0.1, "medium"))


class StubModel:
    """The ``chat_handler`` of the OpenAI stub: reads each prompt and answers valid JSON for its skill."""

    def __init__(self, generator: ChatGenerator) -> None:
        self.generator = generator
        self.calls: Counter[str] = Counter()
        # Extraction calls spent on messages that carry nothing to remember (small talk, replies).
        self.chatter_calls = 0
        self._lock = threading.Lock()
        # The OpenAIStub answering with this model (set once it is started): its usage sums.
        self.stub: Any = None

    def reset(self) -> None:
        """Forget the call counts (and the stub's usage sums, when it serves through this model)."""
        with self._lock:
            self.calls.clear()
            self.chatter_calls = 0
        if self.stub is not None:
            with self.stub._lock:
                self.stub.chat_usage.clear()

    def served(self) -> Counter[str]:
        """The stub's usage sums since the last reset: prompt, completion and cached tokens."""
        if self.stub is None:
            return Counter()
        with self.stub._lock:
            return Counter(self.stub.chat_usage)

    def counts(self) -> Counter[str]:
        """Calls by skill so far (a copy)."""
        with self._lock:
            return Counter(self.calls)

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body.get("messages") or []
        system = next((str(m.get("content", "")) for m in messages if m.get("role") == "system"), "")
        user = next((str(m.get("content", "")) for m in reversed(messages) if m.get("role") == "user"), "")
        kind = prompt_kind(system)
        # Today's skills ask for a strict schema (profiles as a list, facts naming what they replace);
        # the service before issue 36 asked for JSON mode with a mapping of profiles.
        strict = (body.get("response_format") or {}).get("type") == "json_schema"
        if kind == "extract_batch":
            # A call shared by several messages is spent on information if any of them carries some.
            chatter = all(not self._understand(part)[1].facts for _, part in self._batch_parts(user))
        else:
            chatter = kind.startswith("extract") and not self._understand(user)[1].facts
        with self._lock:
            self.calls[kind] += 1
            self.chatter_calls += 1 if chatter else 0
        return json.dumps(self.answer(kind, user, strict=strict), ensure_ascii=False)

    def _understand(self, user: str) -> tuple[str, Annotation]:
        speaker_match = _SPEAKER_LINE.search(user)
        message_match = _MESSAGE_BLOCK.search(user)
        speaker = speaker_match.group("speaker").strip() if speaker_match else "user"
        text = message_match.group("text").strip() if message_match else ""
        found = self.generator.lookup(speaker, text)
        return speaker, found if found is not None else _generic_annotation(speaker, text)

    @staticmethod
    def _batch_parts(user: str) -> list[tuple[int, str]]:
        """A batched prompt's numbered messages, each with its own header and message block."""
        pieces = _BATCH_SECTION.split(user)[1:]
        return [(int(number), body) for number, body in zip(pieces[::2], pieces[1::2], strict=True)]

    def answer(self, kind: str, user: str, *, strict: bool = False) -> dict[str, Any]:
        """The JSON a model would answer to ``kind`` for the rendered ``user`` message."""
        if kind == "extract_batch":
            known = user.split("### Message", 1)[0]
            return {
                "messages": [
                    {"index": number, **self.answer("extract_informed", known + part, strict=strict)}
                    for number, part in self._batch_parts(user)
                ]
            }
        if kind == "reconcile_batch":
            return {
                "decisions": [
                    {"index": int(number), "action": "ADD", "target_fact_id": None, "reason": "New information."}
                    for number in _BATCH_FACT.findall(user)
                ]
            }
        if kind == "reconcile":
            return {"action": "ADD", "target_fact_id": None, "reason": "New information, compatible with the rest."}
        if kind == "disambiguate":
            return {"match": None, "reason": "Not enough evidence that it is the same entity."}
        if kind == "emotion":
            return {"emotion": "neutral", "intensity": 0.1, "energy": "medium"}
        if not kind.startswith("extract"):
            return {}
        _, note = self._understand(user)
        entities = [{"name": name, "type": kind_, "aliases": []} for name, kind_ in note.entities]
        facts = [
            {
                "subject": fact.subject,
                "text": fact.text,
                "attribute_key": fact.attribute_key,
                "action": fact.action,
                "importance_category": fact.category,
                "confidence_level": "explicit_statement",
            }
            for fact in note.facts
        ]
        relations = (
            [{"source": note.relation[0], "target": note.relation[1], "type": note.relation[2]}]
            if note.relation
            else []
        )
        emotion = {"emotion": note.emotion[0], "intensity": note.emotion[1], "energy": note.emotion[2]}
        if kind == "extract_blind.entities":
            return {"entities": entities}
        if kind == "extract_blind.facts":
            return {"facts": [{**fact, "action": "NEW"} for fact in facts]}
        if kind == "extract_blind.relations":
            return {"relations": relations}
        profiles = self._profiles(user, note)
        if not strict:
            return {
                "entities": entities,
                "facts": facts,
                "relations": relations,
                "updated_profiles": profiles,
                "emotion": emotion,
            }
        numbered = self._numbered(user)
        for fact, fact_note in zip(facts, note.facts, strict=True):
            del fact["action"]
            # What it replaces: the subject's known fact in the same slot, when the message changes it.
            fact["replaces"] = next(
                (
                    number
                    for number, (owner, key) in numbered.items()
                    if fact_note.action == "UPDATE" and owner == fact_note.subject and key == fact_note.attribute_key
                ),
                None,
            )
        return {
            "entities": entities,
            "facts": facts,
            "relations": relations,
            "updated_profiles": [{"entity": name, "profile": text} for name, text in profiles.items()],
            "emotion": emotion,
        }

    @staticmethod
    def _numbered(user: str) -> dict[int, tuple[str, str | None]]:
        """The known facts of a prompt: number -> (its entity's name, its attribute key)."""
        numbered: dict[int, tuple[str, str | None]] = {}
        owner = ""
        for line in user.split("### Message", 1)[0].splitlines():
            stripped = line.strip()
            label = _KNOWN_LABEL.match(stripped) if line.startswith("- ") else None
            if label is not None:
                owner = label.group("name")
                continue
            fact = _KNOWN_FACT.match(stripped) if line.startswith("  #") else None
            if fact is not None:
                numbered[int(fact.group("number"))] = (owner, fact.group("key"))
        return numbered

    @staticmethod
    def _profiles(user: str, note: Annotation) -> dict[str, str]:
        """Known profile sentences merged with the new facts, the last three kept, per subject."""
        known: dict[str, str] = {}
        for line in user.splitlines():
            match = _PROFILE_LINE.match(line.strip())
            if match:
                known[match.group("name")] = match.group("profile")
        profiles: dict[str, str] = {}
        for fact in note.facts:
            sentences = [s for s in _SENTENCE_END.split(profiles.get(fact.subject, known.get(fact.subject, ""))) if s]
            if fact.text not in sentences:
                sentences.append(fact.text)
            profiles[fact.subject] = " ".join(sentences[-3:])
        return profiles


# =====================================================================================
# Measuring
# =====================================================================================


@dataclass
class Row:
    """One line of the results table."""

    phase: str
    measure: str
    result: str
    target: str = ""


@dataclass
class RunStats:
    """Processing figures of a set of runs, from ``pipeline_runs``."""

    expected: int
    total: int = 0
    done: int = 0
    failed: int = 0
    timed_out: bool = False
    rate: float = math.nan
    span_s: float = math.nan
    latencies: list[float] = field(default_factory=list)
    service_s: list[float] = field(default_factory=list)
    stage_ms: dict[str, list[float]] = field(default_factory=dict)
    changed_messages: int = 0
    fallbacks: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    tokens: int = 0
    retries: int = 0

    @property
    def pending(self) -> int:
        """Runs neither done nor failed (plus any never stored)."""
        return max(self.expected - self.done - self.failed, 0)

    def p(self, pct: float) -> float:
        """Received->done latency percentile, seconds."""
        return percentile(self.latencies, pct)


_COUNT_SQL = """
SELECT count(*) AS total,
       count(*) FILTER (WHERE status = 'done') AS done,
       count(*) FILTER (WHERE status = 'failed') AS failed
FROM pipeline_runs WHERE agent_id = ANY(%(agents)s)
"""

_RUNS_SQL = """
SELECT status,
       extract(epoch FROM created_at)::float8 AS created,
       extract(epoch FROM finished_at)::float8 AS finished,
       timings,
       coalesce(jsonb_array_length(CASE WHEN jsonb_typeof(result->'facts_added') = 'array'
                                        THEN result->'facts_added' END), 0)
     + coalesce(jsonb_array_length(CASE WHEN jsonb_typeof(result->'facts_updated') = 'array'
                                        THEN result->'facts_updated' END), 0) AS changed,
       coalesce((SELECT o.output->>'used_fallback' FROM pipeline_stage_outputs o
                 WHERE o.event_id = pipeline_runs.event_id AND o.stage = 'extract'), 'false') = 'true' AS fallback,
       error,
       token_usage,
       attempts
FROM pipeline_runs WHERE agent_id = ANY(%(agents)s)
"""


def _count(conn: psycopg.Connection[Any], agents: Sequence[str]) -> tuple[int, int, int]:
    row = conn.execute(_COUNT_SQL, {"agents": list(agents)}).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def wait_for_runs(
    database_url: str,
    agents: Sequence[str],
    expected: int,
    *,
    timeout_s: float,
    label: str,
    alive: Callable[[], list[str]] | None = None,
) -> tuple[int, int, int, bool]:
    """Poll ``pipeline_runs`` until ``expected`` runs of ``agents`` are done or failed (or time runs out).

    One aggregate query every ``POLL_INTERVAL_S`` on one connection kept for the whole wait (a
    connection per poll cost the benchmark and PostgreSQL a backend start each time).
    """
    with psycopg.connect(database_url, autocommit=True) as conn:
        return _wait(conn, agents, expected, timeout_s=timeout_s, label=label, alive=alive)


def _wait(
    conn: psycopg.Connection[Any],
    agents: Sequence[str],
    expected: int,
    *,
    timeout_s: float,
    label: str,
    alive: Callable[[], list[str]] | None,
) -> tuple[int, int, int, bool]:
    started = time.monotonic()
    last_print = started
    total = done = failed = 0
    while True:
        total, done, failed = _count(conn, agents)
        if done + failed >= expected:
            return total, done, failed, False
        now = time.monotonic()
        if now - started > timeout_s:
            print(
                f"  {label}: gave up after {timeout_s:.0f} s with {expected - done - failed} runs pending", flush=True
            )
            return total, done, failed, True
        dead = alive() if alive else []
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited during {label}")
        if now - last_print >= PROGRESS_EVERY_S:
            rate = done / (now - started) if now > started else 0.0
            print(
                f"  {label}: {done + failed:,}/{expected:,} finished ({failed} failed), "
                f"{now - started:.0f} s, ~{rate:.0f} msg/s",
                flush=True,
            )
            last_print = now
        time.sleep(POLL_INTERVAL_S)


def run_stats(database_url: str, agents: Sequence[str], expected: int) -> RunStats:
    """Throughput, latency, per-stage timings and outcomes of the runs of ``agents``."""
    stats = RunStats(expected=expected)
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(_RUNS_SQL, {"agents": list(agents)}).fetchall()
    created_all: list[float] = []
    finished_all: list[float] = []
    for status, created, finished, timings, changed, fallback, error, token_usage, attempts in rows:
        stats.total += 1
        stats.retries += int(attempts or 0)
        created_all.append(created)
        if status == "done":
            stats.done += 1
        elif status == "failed":
            stats.failed += 1
            stats.errors[(error or "?").splitlines()[0][:160]] += 1
        if finished is not None and status in ("done", "failed"):
            finished_all.append(finished)
            stats.latencies.append(finished - created)
        stage_total = 0.0
        for stage, value in (timings or {}).items():
            if isinstance(value, int | float):
                stats.stage_ms.setdefault(stage, []).append(float(value))
                stage_total += float(value)
        if status == "done":
            stats.service_s.append(stage_total / 1000.0)
        stats.changed_messages += 1 if changed else 0
        stats.fallbacks += 1 if fallback else 0
        for usage in (token_usage or {}).values():
            if isinstance(usage, dict):
                stats.tokens += int(usage.get("total_tokens") or 0)
    if created_all and finished_all:
        stats.span_s = max(finished_all) - min(created_all)
        if stats.span_s > 0:
            stats.rate = (stats.done + stats.failed) / stats.span_s
    return stats


async def _post_all(
    client: httpx.AsyncClient, requests: Sequence[tuple[str, bytes]], *, concurrency: int, expect: int = 202
) -> tuple[list[float], list[str]]:
    """POST every (path, body) with ``concurrency`` tasks; per-request latencies and errors."""
    latencies: list[float] = []
    errors: list[str] = []
    queue: Iterator[tuple[str, bytes]] = iter(requests)

    async def worker() -> None:
        for path, body in queue:
            started = time.perf_counter()
            try:
                response = await client.post(path, content=body)
            except httpx.HTTPError as error:
                errors.append(f"{type(error).__name__}: {error}")
                continue
            latencies.append(time.perf_counter() - started)
            if response.status_code != expect:
                errors.append(f"{response.status_code}: {response.text[:200]}")

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, errors


def _client(stack: BenchStack, connections: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=stack.api_url,
        headers=stack.json_headers,
        timeout=httpx.Timeout(60.0),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
    )


def _encode(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


# =====================================================================================
# Phases
# =====================================================================================


@dataclass
class Sizes:
    """How big each phase is (a tenth with ``--quick``)."""

    e2e_agents: int = 50
    e2e_per_agent: int = 40
    # The same messages as a stream of single POSTs at the throughput target (open loop).
    paced_messages: int = 2_000
    paced_rate: float = 100.0
    api_requests: int = 3_000
    api_clients: int = 32
    api_agents: int = 50
    api_warmup: int = 64
    # The open-loop load: a stream of single messages at the pipeline's own target rate.
    api_open_rate: float = 100.0
    batches: int = 20
    batch_size: int = 1_000
    batch_clients: int = 2
    llm_agents: int = 20
    llm_per_agent: int = 50
    locomo_fraction: float = 1.0
    # Caps on the waits, so that a stalled pipeline still ends the run well under 15 minutes.
    e2e_timeout_s: float = 180.0
    llm_timeout_s: float = 180.0
    # Three modes of the LLM phases import LoCoMo one after the other, the first one unbatched.
    locomo_timeout_s: float = 300.0

    @classmethod
    def quick(cls) -> Sizes:
        """A tenth of every phase: a smoke run."""
        return cls(
            e2e_agents=5,
            paced_messages=200,
            api_requests=300,
            api_agents=5,
            api_warmup=16,
            batches=2,
            llm_agents=2,
            locomo_fraction=0.1,
            e2e_timeout_s=60.0,
            llm_timeout_s=60.0,
            locomo_timeout_s=60.0,
        )


def _post_batches(stack: BenchStack, conversations: dict[str, list[ChatLine]], concurrency: int = 4) -> list[str]:
    requests = [
        (f"/v1/agents/{agent}/messages/batch", _encode({"messages": [line.body() for line in lines]}))
        for agent, lines in conversations.items()
    ]

    async def send() -> list[str]:
        async with _client(stack, concurrency) as client:
            _, errors = await _post_all(client, requests, concurrency=concurrency)
        return errors

    return asyncio.run(send())


def _stage_summary(stats: RunStats) -> str:
    parts = []
    for stage in ("extract", "resolve", "reconcile", "upsert"):
        values = stats.stage_ms.get(stage)
        if values:
            parts.append(f"{stage} {percentile(values, 50):.0f}/{percentile(values, 95):.0f}")
    return ", ".join(parts) + " ms (p50/p95)" if parts else "n/a"


def _failure_note(stats: RunStats) -> list[str]:
    return [f"{count} failed with: {error}" for error, count in stats.errors.most_common(3)]


_RETRY_LINE = re.compile(r"(?P<stage>\w+) attempt \d+ failed \((?P<error>\w+): (?P<detail>[^(]{0,60})")


@dataclass
class Window:
    """What happened in the stack between two moments: CPU by process, retried stages from the logs."""

    stack: BenchStack
    started: float = 0.0
    cpu: CpuSnapshot | None = None
    end_cpu: CpuSnapshot | None = None
    logs: dict[Path, int] = field(default_factory=dict)

    def open(self) -> Window:
        """Start the window now."""
        self.started = time.monotonic()
        self.cpu = self.stack.cpu_snapshot()
        self.end_cpu = None
        self.logs = self.stack.log_positions()
        return self

    def close(self) -> CpuSnapshot:
        """End the window's CPU count now (the phase's work is done); later calls keep this end."""
        if self.end_cpu is None:
            self.end_cpu = self.stack.cpu_snapshot()
        return self.end_cpu

    def cpu_row(self, label: str, messages: int, *, complete: bool = True) -> Row:
        """The stack's CPU per message over the window (every process of the stack, the benchmark's apart).

        A phase that timed out spent CPU on messages still in flight: its figure is marked.
        """
        assert self.cpu is not None
        cell = self.close().stack_cpu_cell(self.cpu, messages, "message")
        return Row(label, stack_cpu_label("message"), cell + ("" if complete else INCOMPLETE_CPU))

    def cpu_ms(self, messages: int) -> float:
        """The stack's CPU per message over the window, in milliseconds."""
        assert self.cpu is not None
        return self.close().stack_ms_per(self.cpu, messages)

    def notes(self, label: str, messages: int = 0) -> list[str]:
        """CPU by process over the window (per message too, given ``messages``), and the reasons stages retried."""
        assert self.cpu is not None
        now = self.close()
        out = [
            f"{label}: CPU by process (share of one core; the machine has {os.cpu_count()}): "
            f"{now.describe_since(self.cpu)}."
        ]
        if messages:
            out.append(f"{label}: CPU per message by process: {now.per_item_since(self.cpu, messages)}.")
        foreign = now.foreign_share(self.cpu)
        if foreign > FOREIGN_LOAD_WARNING:
            out.append(
                f"{label}: WARNING: other processes used {foreign * 100:.0f}% of a core during this phase "
                "(a shared machine): its figures are pessimistic."
            )
        reasons: Counter[str] = Counter()
        for line in self.stack.log_lines_since(self.logs):
            match = _RETRY_LINE.search(line)
            if match:
                detail = match.group("detail").strip().rstrip(",;")
                reasons[f"{match.group('stage')}: {match.group('error')}: {detail}"] += 1
        if reasons:
            shown = "; ".join(f"{count} x {reason}" for reason, count in reasons.most_common(3))
            out.append(f"{label}: stage attempts retried (workers' logs): {shown}.")
        return out


@dataclass
class PhaseReport:
    """The table rows of a phase, and notes printed under the table."""

    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    targets: dict[str, bool] = field(default_factory=dict)
    # The stack's CPU per message processed over the phase, when the phase processes messages.
    cpu_ms: float = math.nan


def phase_end_to_end(
    stack: BenchStack,
    sampler: MemorySampler,
    generator: ChatGenerator,
    *,
    label: str,
    prefix: str,
    agents: int,
    per_agent: int,
    timeout_s: float,
    rate_target: float,
    p95_target: float | None,
    stub: StubModel | None = None,
) -> tuple[PhaseReport, RunStats, dict[str, list[ChatLine]]]:
    """Send ``agents`` x ``per_agent`` messages (one batch per agent) and wait until every run finishes."""
    conversations = {f"{prefix}-{i:03d}": generator.conversation(f"{prefix}-{i:03d}", per_agent) for i in range(agents)}
    total = agents * per_agent
    agent_ids = list(conversations)
    print(f"{label}: sending {total:,} messages over {agents} agents (one batch per agent)...", flush=True)
    window = Window(stack).open()
    started = window.started
    errors = _post_batches(stack, conversations)
    if errors:
        raise RuntimeError(f"{label}: {len(errors)} batches refused, e.g. {errors[0]}")
    sent_s = time.monotonic() - started
    _, _, _, timed_out = wait_for_runs(
        stack.database_url, agent_ids, total, timeout_s=timeout_s, label=label, alive=stack.processes_exited
    )
    finished = time.monotonic()
    stats = run_stats(stack.database_url, agent_ids, total)
    stats.timed_out = timed_out
    peak = sampler.peak(started, finished)
    report = PhaseReport()
    rate_ok = stats.rate >= rate_target and not timed_out
    report.targets[f"{label} throughput"] = rate_ok
    rows = report.rows
    rows.append(Row(label, "messages", f"{total:,} over {agents} agents, sent in {secs(sent_s)}"))
    rows.append(Row(label, "processed", f"{stats.rate:,.1f} msg/s", f">= {rate_target:.0f} msg/s: {verdict(rate_ok)}"))
    p95_cell = ""
    if p95_target is not None:
        p95_ok = stats.p(95) <= p95_target and not timed_out
        report.targets[f"{label} p95 latency"] = p95_ok
        p95_cell = f"p95 <= {p95_target:.0f} s: {verdict(p95_ok)}"
    rows.append(Row(label, "received -> done p50 / p95", f"{secs(stats.p(50))} / {secs(stats.p(95))}", p95_cell))
    _add_outcome(report, label, stats, window, wall_s=finished - started, peak=peak)
    if stub is not None:
        calls = stub.counts()
        chat_calls = sum(calls.values())
        chatter = stub.chatter_calls
        informative = sum(1 for lines in conversations.values() for line in lines if line.informative)
        per_message = chat_calls / total if total else math.nan
        # Small talk and replies yield no fact and no entity, so every call but their extraction
        # is spent on a message that carries information.
        per_informative = (chat_calls - chatter) / informative if informative else math.nan
        # Calls of an unfinished run cannot be judged: messages still waiting will make more.
        calls_ok = per_informative <= TARGET_LLM_CALLS_PER_INFORMATIVE and not timed_out
        report.targets[f"{label} LLM calls per informative message"] = calls_ok
        rows.append(Row(label, "LLM chat calls", f"{chat_calls:,} ({_calls_breakdown(calls)})"))
        rows.append(
            Row(
                label,
                "LLM calls per message (all messages)",
                f"{per_message:.2f} ({chatter:,} extraction calls on small talk and replies)",
            )
        )
        rows.append(
            Row(
                label,
                "LLM calls per message carrying new information",
                f"{per_informative:.2f} ({chat_calls - chatter:,} calls / {informative:,} such messages)"
                + (" - run incomplete, not comparable" if timed_out else ""),
                f"<= {TARGET_LLM_CALLS_PER_INFORMATIVE}: "
                + ("n/a (run incomplete)" if timed_out else verdict(calls_ok)),
            )
        )
        report.notes.append(
            f"{label}: {stats.changed_messages:,} messages changed memory (facts added or updated); "
            f"extraction fell back to blind/rules for {stats.fallbacks}; {stats.tokens:,} tokens recorded."
        )
    return report, stats, conversations


def phase_paced(
    stack: BenchStack, sampler: MemorySampler, generator: ChatGenerator, sizes: Sizes, *, label: str
) -> PhaseReport:
    """Single messages at a fixed offered rate (open loop): received -> done when the pipeline keeps up.

    A burst of 2,000 messages sent at once measures queueing behind the burst (the last message
    waits for the 1,999 before it); a stream offered at the throughput target measures how long a
    message takes when the service is loaded as the target says it will be.
    """
    agents = sizes.e2e_agents
    prefix = "p1b-agent"
    requests = _single_requests(generator, prefix, agents, sizes.paced_messages)
    agent_ids = sorted({path.split("/")[3] for path, _ in requests})
    rate = sizes.paced_rate
    print(f"{label}: {len(requests):,} single POSTs at {rate:.0f} msg/s over {agents} agents...", flush=True)
    window = Window(stack).open()
    started = window.started
    latencies, errors = asyncio.run(_post_all_raw(stack, requests, concurrency=sizes.api_clients, rate=rate))
    sent_s = time.monotonic() - started
    if errors:
        raise RuntimeError(f"{label}: {len(errors)} messages refused, e.g. {errors[0]}")
    _, _, _, timed_out = wait_for_runs(
        stack.database_url,
        agent_ids,
        len(requests),
        timeout_s=sizes.e2e_timeout_s,
        label=label,
        alive=stack.processes_exited,
    )
    finished = time.monotonic()
    stats = run_stats(stack.database_url, agent_ids, len(requests))
    stats.timed_out = timed_out
    report = PhaseReport()
    p95_ok = stats.p(95) <= TARGET_E2E_P95_S and not timed_out
    report.targets[f"{label} p95 latency at {rate:.0f} msg/s"] = p95_ok
    rows = report.rows
    rows.append(
        Row(label, "messages", f"{len(requests):,} single POSTs over {agents} agents, offered at {rate:.0f} msg/s")
    )
    rows.append(
        Row(
            label,
            "sent in / accepted p50 / p95",
            f"{secs(sent_s)} / {ms(percentile(latencies, 50))} / {ms(percentile(latencies, 95))}",
        )
    )
    rows.append(
        Row(
            label,
            "received -> done p50 / p95",
            f"{secs(stats.p(50))} / {secs(stats.p(95))}",
            f"p95 <= {TARGET_E2E_P95_S:.0f} s at the {TARGET_E2E_RATE:.0f} msg/s target rate: {verdict(p95_ok)}",
        )
    )
    _add_outcome(report, label, stats, window, wall_s=finished - started, peak=sampler.peak(started, finished))
    report.notes.append(
        f"{label}: single POSTs are gathered into chains of up to {stack.setting('pipeline_intake_chunk_size')} "
        f"messages of any agents, each waiting at most {stack.setting('pipeline_intake_wait_ms')} ms "
        "for the others (ARANDU_PIPELINE_INTAKE_CHUNK_SIZE / _WAIT_MS)."
    )
    return report


def _add_outcome(report: PhaseReport, label: str, stats: RunStats, window: Window, *, wall_s: float, peak: int) -> None:
    """The rows and notes every end-to-end phase reports: failures, wall time, stage times, CPU."""
    report.rows.append(
        Row(
            label,
            "failed / pending",
            f"{stats.failed} / {stats.pending}" + (" (timed out)" if stats.timed_out else ""),
            "0 failed",
        )
    )
    report.rows.append(window.cpu_row(label, stats.done + stats.failed, complete=not stats.timed_out))
    report.cpu_ms = math.nan if stats.timed_out else window.cpu_ms(stats.done + stats.failed)
    report.rows.append(Row(label, "wall time / peak memory", f"{secs(wall_s)} / {mib(peak)}"))
    report.notes.append(
        f"{label}: time in stages {_stage_summary(stats)}; processing without queueing p50 "
        f"{secs(percentile(stats.service_s, 50))}, p95 {secs(percentile(stats.service_s, 95))}; "
        f"{stats.retries} stage attempts retried."
    )
    report.notes.extend(window.notes(label, stats.done + stats.failed))
    report.notes.extend(f"{label}: {note}" for note in _failure_note(stats))


def _calls_breakdown(calls: Counter[str]) -> str:
    return ", ".join(f"{kind} {count:,}" for kind, count in calls.most_common()) or "none"


def _single_requests(generator: ChatGenerator, prefix: str, agents: int, count: int) -> list[tuple[str, bytes]]:
    """``count`` single-message requests over ``agents`` agents, interleaved as concurrent users send them."""
    per_agent = math.ceil(count / agents)
    ordered: list[tuple[int, int, str, bytes]] = []
    for i in range(agents):
        agent = f"{prefix}-{i:03d}"
        for position, line in enumerate(generator.conversation(agent, per_agent)):
            ordered.append((position, i, f"/v1/agents/{agent}/messages", _encode(line.body())))
    ordered.sort(key=lambda item: (item[0], item[1]))
    return [(path, body) for _, _, path, body in ordered[:count]]


async def _post_all_raw(
    stack: BenchStack,
    requests: Sequence[tuple[str, bytes]],
    *,
    concurrency: int,
    expect: int = 202,
    rate: float | None = None,
) -> tuple[list[float], list[str]]:
    """The same as :func:`_post_all` from the low-CPU load generator (:mod:`ops.bench.http_load`).

    About a hundredth of the CPU httpx spends per request, which matters when the load
    generator shares two cores with the stack. With ``rate`` the load is open: request *i* is
    due at ``i / rate`` seconds whatever the answers before it, and its latency counts from
    that moment (no coordinated omission).
    """
    outcome = await send_all(
        stack.api_url, stack.json_headers, requests, concurrency=concurrency, expect=expect, rate=rate
    )
    return outcome.latencies, outcome.errors


@dataclass
class LoadResult:
    """Latencies and errors of one load, its wall time and the client's CPU per request."""

    latencies: list[float]
    errors: list[str]
    wall_s: float
    client_cpu_ms: float
    # The API processes' CPU per request (the workers process accepted messages meanwhile).
    api_cpu_ms: float = math.nan

    @property
    def rate(self) -> float:
        """Requests answered per second."""
        return len(self.latencies) / self.wall_s if self.wall_s > 0 else math.nan

    def summary(self) -> str:
        """``p50 / p95 / p99``."""
        values = self.latencies
        return f"{ms(percentile(values, 50))} / {ms(percentile(values, 95))} / {ms(percentile(values, 99))}"


def phase_acceptance(
    stack: BenchStack, sampler: MemorySampler, generator: ChatGenerator, sizes: Sizes, *, label: str
) -> PhaseReport:
    """Single-message latency under concurrent clients, then batched acceptance rate; workers run meanwhile."""
    report = PhaseReport()
    singles = _single_requests(generator, "p2-single", sizes.api_agents, sizes.api_requests)
    control = _single_requests(generator, "p2-httpx", sizes.api_agents, sizes.api_requests)
    opened = _single_requests(generator, "p2-open", sizes.api_agents, sizes.api_requests)
    warmup = _single_requests(generator, "p2-warmup", 1, sizes.api_warmup)
    prefixes = ("p2-single", "p2-httpx", "p2-open")
    agent_ids = [f"{prefix}-{i:03d}" for prefix in prefixes for i in range(sizes.api_agents)]
    batch_agents = [f"p2-batch-{i:03d}" for i in range(sizes.batches)]
    batches = [
        (
            f"/v1/agents/{agent}/messages/batch",
            _encode({"messages": [line.body() for line in generator.conversation(agent, sizes.batch_size)]}),
        )
        for agent in batch_agents
    ]
    print(
        f"{label}: {len(singles):,} single POSTs on {sizes.api_clients} connections (workers running), the same "
        f"from {sizes.api_clients} httpx clients, an open loop, then {sizes.batches} batches of "
        f"{sizes.batch_size:,}...",
        flush=True,
    )

    def load_result(lat: list[float], err: list[str], wall_s: float, before: CpuSnapshot) -> LoadResult:
        spent = stack.cpu_snapshot().since(before)
        count = len(lat)
        client = spent.get(BENCHMARK_ROLE, 0.0)
        api = sum(seconds for role, seconds in spent.items() if role.startswith("api"))
        return LoadResult(
            lat,
            err,
            wall_s,
            client / count * 1000 if count else math.nan,
            api / count * 1000 if count else math.nan,
        )

    async def measure() -> tuple[LoadResult, LoadResult, LoadResult, LoadResult]:
        await _post_all_raw(stack, warmup, concurrency=min(sizes.api_clients, len(warmup)))
        before, started = stack.cpu_snapshot(), time.perf_counter()
        lat, err = await _post_all_raw(stack, singles, concurrency=sizes.api_clients)
        closed_load = load_result(lat, err, time.perf_counter() - started, before)
        async with _client(stack, sizes.api_clients) as client:
            before, started = stack.cpu_snapshot(), time.perf_counter()
            lat, err = await _post_all(client, control, concurrency=sizes.api_clients)
            httpx_load = load_result(lat, err, time.perf_counter() - started, before)
        before, started = stack.cpu_snapshot(), time.perf_counter()
        lat, err = await _post_all_raw(stack, opened, concurrency=sizes.api_clients, rate=sizes.api_open_rate)
        open_load = load_result(lat, err, time.perf_counter() - started, before)
        async with _client(stack, sizes.batch_clients) as client:
            before, started = stack.cpu_snapshot(), time.perf_counter()
            lat, err = await _post_all(client, batches, concurrency=sizes.batch_clients)
            batch_load = load_result(lat, err, time.perf_counter() - started, before)
        return closed_load, httpx_load, open_load, batch_load

    window = Window(stack).open()
    started = window.started
    closed_load, httpx_load, open_load, batch_load = uvloop.run(measure())
    finished = time.monotonic()
    peak = sampler.peak(started, finished)
    p95 = percentile(closed_load.latencies, 95)
    p95_ok = p95 <= TARGET_API_P95_S and not closed_load.errors
    open_p95 = percentile(open_load.latencies, 95)
    open_ok = open_p95 <= TARGET_API_P95_S and not open_load.errors
    batch_rate = (sizes.batches * sizes.batch_size) / batch_load.wall_s if batch_load.wall_s > 0 else math.nan
    batch_ok = batch_rate >= TARGET_BATCH_RATE and not batch_load.errors
    report.targets[f"{label} single POST p95 (closed loop)"] = p95_ok
    report.targets[f"{label} single POST p95 (open loop, {sizes.api_open_rate:.0f} req/s)"] = open_ok
    report.targets[f"{label} batched acceptance"] = batch_ok
    rows = report.rows
    rows.append(
        Row(
            label,
            f"single POST latency p50 / p95 / p99, closed loop ({sizes.api_clients} connections of the low-CPU "
            f"client, each sending again as soon as answered, {len(singles):,} requests; latency = clients / "
            "throughput)",
            closed_load.summary(),
            f"p95 <= {TARGET_API_P95_S * 1000:.0f} ms: {verdict(p95_ok)}",
        )
    )
    rows.append(
        Row(
            label,
            "single POST throughput / errors / client CPU per request",
            f"{closed_load.rate:,.0f} req/s / {len(closed_load.errors)} / {closed_load.client_cpu_ms:.2f} ms",
        )
    )
    rows.append(
        Row(
            label,
            f"control: same load from {sizes.api_clients} httpx clients",
            f"{httpx_load.summary()}; {httpx_load.rate:,.0f} req/s; "
            f"client CPU {httpx_load.client_cpu_ms:.1f} ms/request",
        )
    )
    rows.append(
        Row(
            label,
            f"single POST latency p50 / p95 / p99, open loop ({sizes.api_open_rate:.0f} req/s offered on "
            f"{sizes.api_clients} connections of the low-CPU client, {len(opened):,} requests, from the due time)",
            f"{open_load.summary()}; {open_load.rate:,.0f} req/s answered; {len(open_load.errors)} errors",
            f"p95 <= {TARGET_API_P95_S * 1000:.0f} ms: {verdict(open_ok)}",
        )
    )
    rows.append(
        Row(
            label,
            f"batched acceptance ({sizes.batches} x {sizes.batch_size:,}, {sizes.batch_clients} clients)",
            f"{batch_rate:,.0f} msg/s (batch p50 {ms(percentile(batch_load.latencies, 50))}, "
            f"max {ms(max(batch_load.latencies, default=math.nan))})",
            f">= {TARGET_BATCH_RATE:,.0f} msg/s: {verdict(batch_ok)}",
        )
    )
    rows.append(
        Row(
            label,
            "API processes' CPU per single POST (closed loop; open loop) / per message of a batch",
            f"{closed_load.api_cpu_ms:.2f} ms; {open_load.api_cpu_ms:.2f} ms / "
            f"{batch_load.api_cpu_ms / sizes.batch_size:.3f} ms",
        )
    )
    rows.append(Row(label, "wall time / peak memory", f"{secs(finished - started)} / {mib(peak)}"))
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        total, done, failed = _count(conn, agent_ids + batch_agents)
    report.notes.append(
        f"{label}: the worker pools kept running during the measurement (as in production) and finished "
        f"{done + failed:,} of the {total:,} messages accepted by the end of it; the rest were dropped "
        "with the broker's queues when the processes restarted for the next phase. The single-POST "
        "target is shown against two loads: the closed loop (32 connections, each sending again as soon as "
        "answered: its latency is 32 / throughput, so it measures throughput) and the open loop (requests due at "
        "a fixed rate whatever the answers: the latency a client sees at that load). Both come from the low-CPU "
        "load generator (ops/bench/http_load.py, pre-built requests on keep-alive connections, tens of "
        "microseconds per request): a load generator on the stack's two cores must not be what is measured. The "
        "httpx control is the same closed loop from a typical Python client, with its own CPU per request."
    )
    report.notes.extend(window.notes(label))
    for load, what in (
        (closed_load, "single POSTs"),
        (httpx_load, "httpx control POSTs"),
        (open_load, "open-loop POSTs"),
        (batch_load, "batches"),
    ):
        if load.errors:
            report.notes.append(f"{label}: {len(load.errors)} {what} failed, e.g. {load.errors[0]}")
    return report


def _parse_locomo_date(value: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` as an aware UTC datetime."""
    cleaned = " ".join(value.replace("\u202f", " ").split())
    return datetime.strptime(cleaned, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def locomo_imports(path: Path, fraction: float = 1.0) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """One import per conversation: every turn of every session, in order; and how many turns were skipped."""
    data = json.loads(path.read_text())
    imports: dict[str, list[dict[str, Any]]] = {}
    skipped = 0
    for sample in data:
        conversation = sample["conversation"]
        sessions = sorted(
            (int(key.split("_")[1]), key)
            for key, value in conversation.items()
            if re.fullmatch(r"session_\d+", key) and isinstance(value, list)
        )
        messages: list[dict[str, Any]] = []
        for number, key in sessions:
            occurred_at = _parse_locomo_date(conversation[f"{key}_date_time"]).isoformat()
            for turn in conversation[key]:
                text = str(turn.get("text") or "").strip()
                caption = str(turn.get("blip_caption") or "").strip()
                if caption:
                    text = f"{text} [image: {caption}]".strip()
                if not text:
                    skipped += 1
                    continue
                messages.append(
                    {
                        "message": text,
                        "speaker_name": turn["speaker"],
                        "occurred_at": occurred_at,
                        "message_id": turn["dia_id"],
                        "session_id": f"session_{number}",
                    }
                )
        keep = max(1, math.ceil(len(messages) * fraction))
        imports[f"locomo-{sample.get('sample_id', len(imports))}"] = messages[:keep]
    return imports, skipped


def phase_locomo(
    stack: BenchStack, sampler: MemorySampler, sizes: Sizes, *, label: str
) -> tuple[PhaseReport, RunStats | None]:
    """Import the LoCoMo sample (one agent per conversation) and wait until nothing is pending."""
    report = PhaseReport()
    if not LOCOMO_PATH.exists():
        report.rows.append(Row(label, "skipped", f"{LOCOMO_PATH} not found"))
        return report, None
    imports, skipped = locomo_imports(LOCOMO_PATH, sizes.locomo_fraction)
    total = sum(len(messages) for messages in imports.values())
    print(f"{label}: importing {total:,} LoCoMo turns as {len(imports)} imports...", flush=True)
    requests = [(f"/v1/agents/{agent}/imports", _encode({"messages": msgs})) for agent, msgs in imports.items()]

    async def send() -> list[str]:
        ids: list[str] = []
        async with _client(stack, 2) as client:
            for path, body in requests:
                response = await client.post(path, content=body)
                if response.status_code != 202:
                    raise RuntimeError(f"{label}: import refused: {response.status_code} {response.text[:300]}")
                ids.append(response.json()["import_id"])
        return ids

    window = Window(stack).open()
    started = window.started
    import_ids = asyncio.run(send())
    accepted_s = time.monotonic() - started
    deadline = started + sizes.locomo_timeout_s
    last_print = started
    progress: list[dict[str, Any]] = []
    timed_out = False
    with httpx.Client(base_url=stack.api_url, headers=stack.json_headers, timeout=30) as client:
        while True:
            progress = [client.get(f"/v1/imports/{import_id}").json() for import_id in import_ids]
            pending = sum(int(item["pending"]) for item in progress)
            now = time.monotonic()
            if pending == 0:
                break
            if now > deadline:
                timed_out = True
                print(f"  {label}: gave up with {pending:,} messages pending", flush=True)
                break
            dead = stack.processes_exited()
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited during {label}")
            if now - last_print >= PROGRESS_EVERY_S:
                done = sum(int(item["done"]) + int(item["failed"]) for item in progress)
                print(f"  {label}: {done:,}/{total:,} finished, {now - started:.0f} s", flush=True)
                last_print = now
            time.sleep(POLL_INTERVAL_S)
    wall = time.monotonic() - started
    window.close()
    peak = sampler.peak(started, time.monotonic())
    failed = sum(int(item["failed"]) for item in progress)
    done = sum(int(item["done"]) for item in progress)
    stats = run_stats(stack.database_url, list(imports), total)
    rows = report.rows
    rows.append(
        Row(
            label,
            "messages",
            f"{total:,} turns of {len(imports)} conversations ({accepted_s:.2f} s to accept the imports)",
        )
    )
    rows.append(Row(label, "wall time (first POST -> nothing pending)", secs(wall)))
    rows.append(Row(label, "processed", f"{(done + failed) / wall:,.1f} msg/s" if wall > 0 else "n/a"))
    rows.append(window.cpu_row(label, done + failed, complete=not timed_out))
    report.cpu_ms = math.nan if timed_out else window.cpu_ms(done + failed)
    rows.append(
        Row(
            label,
            "failed / pending",
            f"{failed} / {max(total - done - failed, 0)}" + (" (timed out)" if timed_out else ""),
            "0 failed",
        )
    )
    rows.append(Row(label, "peak memory", mib(peak)))
    report.notes.append(
        f"{label}: received -> done p50 {secs(stats.p(50))}, p95 {secs(stats.p(95))}; time in stages "
        f"{_stage_summary(stats)}; {stats.retries} stage attempts retried"
        + (f"; {skipped} empty turns skipped" if skipped else "")
        + "."
    )
    report.notes.extend(window.notes(label, done + failed))
    report.notes.extend(f"{label}: {note}" for note in _failure_note(stats))
    return report, stats


# =====================================================================================
# LLM batching: the stub phases with batching off and on, side by side
# =====================================================================================

# The service before issue 36 (the last commit of main before its first merge): its calls and
# tokens are the "today" the targets are ratios of, measured in the same run on the same stub.
BASELINE_COMMIT = "7851838"
BATCH_MODES = (("unbatched", "false"), ("batched", "true"))
BASELINE_MODE = "pre-issue"
TARGET_CALLS_PER_MESSAGE_BURST = 0.5
TARGET_CALLS_PER_MESSAGE_PACED = 1.0
TARGET_TOKEN_RATIO = 0.7
TARGET_THROUGHPUT_RATIO = 2.0
TARGET_MEMORY_DRIFT = 0.02
LLM_PACED_RATE = 20.0
INCOMPLETE_CPU = " - run incomplete (timed out): messages still in flight took CPU too, not comparable"

_MEMORY_SQL = """
SELECT (SELECT count(*) FROM memory_facts WHERE agent_id = ANY(%(agents)s) AND valid_to IS NULL),
       (SELECT count(*) FROM memory_entities WHERE agent_id = ANY(%(agents)s))
"""
_FACT_SOURCES_SQL = """
SELECT f.fact_text, e.speaker, e.text, e.id::text
FROM memory_facts f JOIN memory_events e ON e.id = f.source_event_id
WHERE f.agent_id = ANY(%(agents)s)
"""


@dataclass
class ModeFigures:
    """One batching mode's figures for one workload."""

    messages: int = 0
    calls: int = 0
    tokens: int = 0
    rate: float = math.nan
    failed: int = 0
    pending: int = 0
    active_facts: int = 0
    entities: int = 0
    foreign_facts: int = 0
    unexplained_facts: int = 0
    breakdown: str = ""
    foreign_examples: list[str] = field(default_factory=list)
    cpu_ms: float = math.nan
    # What the stub served (OpenAI's prompt-cache rule simulated): prompt and cached prompt tokens.
    served_prompt: int = 0
    served_cached: int = 0
    served_completion: int = 0

    def serve(self, served: Counter[str]) -> None:
        """Take the stub's usage sums of this workload."""
        self.served_prompt = served["prompt_tokens"]
        self.served_cached = served["cached_tokens"]
        self.served_completion = served["completion_tokens"]

    @property
    def cached_share(self) -> float:
        """Share of the prompt tokens OpenAI's prompt cache would have served."""
        return self.served_cached / self.served_prompt if self.served_prompt else math.nan

    @property
    def billed_per_message(self) -> float:
        """Tokens per message with cached prompt tokens at half price (OpenAI's discount for gpt-4o-mini)."""
        billed = self.served_prompt - self.served_cached / 2 + self.served_completion
        return billed / self.messages if self.messages else math.nan

    @property
    def calls_per_message(self) -> float:
        """Chat calls per message."""
        return self.calls / self.messages if self.messages else math.nan

    @property
    def tokens_per_message(self) -> float:
        """Recorded tokens per message."""
        return self.tokens / self.messages if self.messages else math.nan


def _normal(text: str) -> str:
    return " ".join(text.casefold().split()).rstrip(".!? ")


def memory_figures(database_url: str, agents: Sequence[str], model: StubModel, figures: ModeFigures) -> None:
    """Active facts, entities, and facts whose text the stub gave another message than their source."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(_MEMORY_SQL, {"agents": list(agents)}).fetchone()
        sources = conn.execute(_FACT_SOURCES_SQL, {"agents": list(agents)}).fetchall()
    assert row is not None
    figures.active_facts, figures.entities = int(row[0]), int(row[1])
    expected_of: dict[str, set[str]] = {}
    owner_of: dict[str, set[str]] = {}
    for _, speaker, text, event_id in sources:
        if event_id in expected_of:
            continue
        note = model.generator.lookup(speaker, text) or _generic_annotation(speaker, text)
        expected_of[event_id] = {_normal(fact.text) for fact in note.facts}
    # Every message of these agents, not only those with facts, may be where a fact came from.
    with psycopg.connect(database_url, autocommit=True) as conn:
        events = conn.execute(
            "SELECT id::text, speaker, text FROM memory_events WHERE agent_id = ANY(%(agents)s)",
            {"agents": list(agents)},
        ).fetchall()
    for event_id, speaker, text in events:
        note = model.generator.lookup(speaker, text) or _generic_annotation(speaker, text)
        for fact in note.facts:
            owner_of.setdefault(_normal(fact.text), set()).add(event_id)
    for fact_text, _, _, event_id in sources:
        wanted = _normal(fact_text)
        if wanted in expected_of[event_id]:
            continue
        if owner_of.get(wanted, set()) - {event_id}:
            figures.foreign_facts += 1
            if len(figures.foreign_examples) < 3:
                figures.foreign_examples.append(f"{fact_text!r} on {event_id}")
        else:
            figures.unexplained_facts += 1


def _paced_llm(
    stack: BenchStack, generator: ChatGenerator, model: StubModel, *, label: str, prefix: str, count: int, agents: int
) -> tuple[ModeFigures, RunStats]:
    """Single POSTs at ``LLM_PACED_RATE`` over ``agents`` agents: calls and tokens per message."""
    requests = _single_requests(generator, prefix, agents, count)
    agent_ids = sorted({path.split("/")[3] for path, _ in requests})
    print(f"{label}: {len(requests):,} single POSTs at {LLM_PACED_RATE:.0f} msg/s over {agents} agents...", flush=True)
    model.reset()
    window = Window(stack).open()
    _, errors = asyncio.run(_post_all_raw(stack, requests, concurrency=8, rate=LLM_PACED_RATE))
    if errors:
        raise RuntimeError(f"{label}: {len(errors)} messages refused, e.g. {errors[0]}")
    _, _, _, timed_out = wait_for_runs(
        stack.database_url, agent_ids, len(requests), timeout_s=120, label=label, alive=stack.processes_exited
    )
    cpu_ms = math.nan if timed_out else window.cpu_ms(len(requests))
    stats = run_stats(stack.database_url, agent_ids, len(requests))
    stats.timed_out = timed_out
    calls = model.counts()
    figures = ModeFigures(
        messages=len(requests),
        calls=sum(calls.values()),
        tokens=stats.tokens,
        rate=stats.rate,
        failed=stats.failed,
        pending=stats.pending,
        breakdown=_calls_breakdown(calls),
        cpu_ms=cpu_ms,
    )
    figures.serve(model.served())
    return figures, stats


def phase_llm_batching(
    stack: BenchStack,
    sampler: MemorySampler,
    generator: ChatGenerator,
    sizes: Sizes,
    *,
    stub_url: str,
    model: StubModel,
    llm_env: Mapping[str, str],
    baseline: Path | None = None,
) -> PhaseReport:
    """The LLM-stub workloads (a burst of batches, paced single messages, the LoCoMo import), batching off then on.

    Each mode runs on a fresh database with the same messages, so memory can be compared.
    ``baseline``: a checkout of the service before issue 36, run first as the mode ``pre-issue``.
    """
    report = PhaseReport()
    burst: dict[str, ModeFigures] = {}
    paced: dict[str, ModeFigures] = {}
    locomo: dict[str, ModeFigures] = {}
    modes: list[tuple[str, str, Path | None]] = [(mode, flag, None) for mode, flag in BATCH_MODES]
    if baseline is not None:
        modes.insert(0, (BASELINE_MODE, "false", baseline))
    for mode, flag, code_root in modes:
        settings = {**LLM_SETTINGS, **dict(llm_env), "ARANDU_LLM_BASE_URL": stub_url}
        settings["ARANDU_PIPELINE_LLM_BATCHING"] = flag
        restart_s = stack.restart(
            database=f"arandu_llm_{mode.replace('-', '_')}", env=settings, flush_broker=True, code_root=code_root
        )
        report.rows.append(Row(f"3 LLM stub, {mode}", "restart on a fresh database", secs(restart_s)))
        model.reset()
        e2e, stats, conversations = phase_end_to_end(
            stack,
            sampler,
            generator,
            label=f"3 LLM stub, {mode}: burst",
            prefix="p3-agent",
            agents=sizes.llm_agents,
            per_agent=sizes.llm_per_agent,
            timeout_s=sizes.llm_timeout_s,
            rate_target=TARGET_LLM_RATE,
            p95_target=None,
            stub=model,
        )
        calls = model.counts()
        burst[mode] = ModeFigures(
            messages=sum(len(lines) for lines in conversations.values()),
            calls=sum(calls.values()),
            tokens=stats.tokens,
            rate=stats.rate,
            failed=stats.failed,
            pending=stats.pending,
            breakdown=_calls_breakdown(calls),
            cpu_ms=e2e.cpu_ms,
        )
        burst[mode].serve(model.served())
        report.notes.extend(e2e.notes)
        paced[mode], _ = _paced_llm(
            stack,
            generator,
            model,
            label=f"3 LLM stub, {mode}: paced",
            prefix="p3p-agent",
            count=max(20, sizes.llm_agents * 10),
            agents=sizes.llm_agents,
        )
        model.reset()
        import_report, import_stats = phase_locomo(stack, sampler, sizes, label=f"4b LoCoMo import, LLM stub, {mode}")
        report.notes.extend(import_report.notes)
        if import_stats is not None:
            calls = model.counts()
            figures = ModeFigures(
                messages=import_stats.expected,
                calls=sum(calls.values()),
                tokens=import_stats.tokens,
                rate=import_stats.rate,
                failed=import_stats.failed,
                pending=import_stats.pending,
                breakdown=_calls_breakdown(calls),
                cpu_ms=import_report.cpu_ms,
            )
            figures.serve(model.served())
            imports, _ = locomo_imports(LOCOMO_PATH, sizes.locomo_fraction)
            memory_figures(stack.database_url, list(imports), model, figures)
            locomo[mode] = figures
    _batching_rows(report, burst, paced, locomo)
    return report


def _ratio(new: float, old: float) -> float:
    return new / old if old else math.nan


def _batching_rows(
    report: PhaseReport,
    burst: dict[str, ModeFigures],
    paced: dict[str, ModeFigures],
    locomo: dict[str, ModeFigures],
) -> None:
    """The side-by-side rows and the targets of issue 36."""
    rows = report.rows
    for name, figures in (("burst of batches", burst), ("paced single messages", paced), ("LoCoMo import", locomo)):
        if len(figures) < 2:
            continue
        off, on = figures["unbatched"], figures["batched"]
        # The targets are ratios of the service before the issue when it ran, else of batching off.
        base_name = BASELINE_MODE if BASELINE_MODE in figures else "unbatched"
        base = figures[base_name]
        shown = [(mode, figures[mode]) for mode in (BASELINE_MODE, "unbatched", "batched") if mode in figures]
        modes = " -> ".join(mode for mode, _ in shown)
        label = f"LLM batching: {name}"
        rows.append(Row(label, "messages", f"{on.messages:,}"))
        rows.append(
            Row(
                label,
                f"chat calls per message, {modes}",
                " -> ".join(f"{figure.calls_per_message:.3f}" for _, figure in shown)
                + " ("
                + " -> ".join(figure.breakdown for _, figure in shown)
                + ")",
                _calls_target(report, name, on.calls_per_message),
            )
        )
        token_ratio = _ratio(on.tokens_per_message, base.tokens_per_message)
        token_ok = token_ratio <= TARGET_TOKEN_RATIO
        report.targets[f"{label} tokens per message"] = token_ok
        rows.append(
            Row(
                label,
                f"tokens per message, {modes}",
                " -> ".join(f"{figure.tokens_per_message:,.0f}" for _, figure in shown)
                + f" (batched / {base_name}: {token_ratio:.2f}x)",
                f"<= {TARGET_TOKEN_RATIO}x: {verdict(token_ok)}",
            )
        )
        rows.append(
            Row(
                label,
                f"prompt tokens OpenAI's cache would serve; tokens per message billed with them at half price, {modes}",
                " -> ".join(f"{figure.cached_share * 100:.0f}%" for _, figure in shown)
                + "; "
                + " -> ".join(f"{figure.billed_per_message:,.0f}" for _, figure in shown)
                + f" (batched / {base_name}: {_ratio(on.billed_per_message, base.billed_per_message):.2f}x)",
            )
        )
        speed = _ratio(on.rate, base.rate)
        cell = ""
        if name != "paced single messages":
            speed_ok = speed >= TARGET_THROUGHPUT_RATIO
            report.targets[f"{label} throughput"] = speed_ok
            cell = f">= {TARGET_THROUGHPUT_RATIO:.0f}x: {verdict(speed_ok)}"
        rows.append(
            Row(
                label,
                f"processed, {modes}",
                " -> ".join(f"{figure.rate:,.1f}" for _, figure in shown)
                + f" msg/s (batched / {base_name}: {speed:.2f}x)",
                cell,
            )
        )
        rows.append(
            Row(
                label,
                f"{stack_cpu_label('message')}, {modes}",
                " -> ".join(f"{figure.cpu_ms:,.1f}" for _, figure in shown)
                + " ms"
                + (
                    " (nan: that run timed out, messages still in flight)"
                    if any(math.isnan(figure.cpu_ms) for _, figure in shown)
                    else ""
                ),
            )
        )
        rows.append(
            Row(
                label,
                f"failed / pending, {modes.replace(' -> ', '; ')}",
                "; ".join(f"{figure.failed} / {figure.pending}" for _, figure in shown),
                "0 failed",
            )
        )
        if name == "LoCoMo import":
            facts_drift = abs(_ratio(on.active_facts, off.active_facts) - 1)
            entities_drift = abs(_ratio(on.entities, off.entities) - 1)
            same_ok = facts_drift <= TARGET_MEMORY_DRIFT and entities_drift <= TARGET_MEMORY_DRIFT
            report.targets[f"{label} same memory"] = same_ok
            rows.append(
                Row(
                    label,
                    "active facts / entities, unbatched -> batched",
                    f"{off.active_facts:,} / {off.entities:,} -> {on.active_facts:,} / {on.entities:,} "
                    f"({facts_drift * 100:.1f}% / {entities_drift * 100:.1f}%)",
                    f"within {TARGET_MEMORY_DRIFT * 100:.0f}%: {verdict(same_ok)}",
                )
            )
            for mode, shown in (("unbatched", off), ("batched", on)):
                if shown.foreign_examples:
                    report.notes.append(f"{label}: {mode}: on another message: " + "; ".join(shown.foreign_examples))
            wrong_ok = on.foreign_facts == 0
            report.targets[f"{label} facts on the wrong message"] = wrong_ok
            rows.append(
                Row(
                    label,
                    "facts attributed to another message (of the same agent), unbatched; batched",
                    f"{off.foreign_facts}; {on.foreign_facts} (facts the stub gave no message: "
                    f"{off.unexplained_facts}; {on.unexplained_facts})",
                    f"0: {verdict(wrong_ok)}",
                )
            )


def _calls_target(report: PhaseReport, name: str, value: float) -> str:
    limit = TARGET_CALLS_PER_MESSAGE_PACED if name == "paced single messages" else TARGET_CALLS_PER_MESSAGE_BURST
    held = value <= limit
    report.targets[f"LLM batching: {name} calls per message"] = held
    return f"<= {limit}: {verdict(held)}"


# =====================================================================================
# The run
# =====================================================================================


def _command(argv: Sequence[str]) -> str:
    args = " ".join(argv)
    if os.environ.get("OPS_BENCH_WRAPPER"):
        return f"./ops/bench/ingest {args}".strip()
    return f"python -m ops.bench ingest {args}".strip()


def _stack_description(stack: BenchStack) -> str:
    from memory_core.settings import load_settings

    settings = load_settings()
    apply = f"{settings.apply_processes} process{'es' if settings.apply_processes > 1 else ''}"
    return (
        f"API (uvicorn x {settings.api_processes} processes), worker-ingest (threads x "
        f"{settings.ingest_concurrency}), worker-apply ({apply} x "
        f"{settings.apply_concurrency} threads), worker-maintenance (prefork x {settings.maintenance_concurrency}), "
        f"Beat, Flower; batches and imports in chains of up to {settings.chunk_size} events of one agent; "
        f"embedded PostgreSQL 18 + pgvector and Redis; DB pool {settings.database_pool_size} "
        f"(+{settings.database_pool_size} overflow) per process; LLM {settings.llm.value}, embeddings "
        f"{settings.embedder.value} ({settings.dimensions}); ARANDU_LOG_LEVEL={settings.log_level.value}"
    )


def _section(
    machine: MachineInfo,
    *,
    command: str,
    quick: bool,
    stack_line: str,
    load: str,
    rows: Sequence[Row],
    notes: Sequence[str],
) -> str:
    # The LLM phases alone are a benchmark of their own on the dashboard (a run of them replaces
    # the previous one, not the whole ingest run).
    name = "Ingest, LLM stub phases" if "--llm-only" in command else "Ingest"
    title = f"## {name} — {machine.date:%Y-%m-%d %H:%M} UTC" + (" — quick (a tenth of the size)" if quick else "")
    table = markdown_table(
        ("phase", "measure", "result", "target"), [(r.phase, r.measure, r.result, r.target) for r in rows]
    )
    bullet_notes = "\n".join(f"- {note}" for note in notes)
    return (
        f"{title}\n\n- command: `{command}`\n- machine: {machine.describe()}; {load}\n- stack: {stack_line}\n\n"
        f"{table}\n\n{bullet_notes}\n"
    )


def run_ingest_benchmark(
    *,
    quick: bool,
    keep_home: bool,
    record: bool,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    llm_env: Mapping[str, str] | None = None,
    llm_only: bool = False,
    baseline: str | None = BASELINE_COMMIT,
    llm_fraction: float = 1.0,
) -> int:
    """Run the four phases, print the table and append it to RESULTS.md; 0 when the run completed.

    ``env`` adds settings to every phase and ``llm_env`` to phase 3 only (diagnosis runs: the
    command recorded with the figures shows them). ``llm_only`` runs phase 3 alone (the LLM
    stub workloads, batching off and on). ``baseline``: the commit of the service whose LLM phases
    run first, as the reference of the cost targets (``None``: batching off is the reference).
    ``llm_fraction`` scales the LLM phases' burst and LoCoMo import (not the paced messages), for a
    machine too busy to run three modes of them at full size.
    """
    from memory_core.settings import load_settings

    sizes = Sizes.quick() if quick else Sizes()
    machine = machine_info()
    command = _command(argv)
    generator = ChatGenerator()
    rows: list[Row] = []
    notes: list[str] = []
    targets: dict[str, bool] = {}
    stack_line = ""
    overall_started = time.monotonic()
    load = "load average at start {:.2f} / {:.2f} / {:.2f} (1 / 5 / 15 min)".format(*os.getloadavg())
    stack = BenchStack(env=env, keep_home=keep_home, label="bench")
    sampler = MemorySampler(stack)
    stub: Any = None
    statements: StatementStats | None = None
    top_statements: list[str] = []
    code = 0
    try:
        print(f"ingest benchmark{' (quick)' if quick else ''} on {machine.describe()}; {load}", flush=True)
        ready_s = stack.start()
        print(f"stack ready in {ready_s:.1f} s under {stack.home}", flush=True)
        stack_line = _stack_description(stack)
        statements = StatementStats(stack.database_url)
        statements.reset()
        sampler.start()
        idle = sampler.settled(3.0)
        idle_ok = idle < IDLE_BUDGET_BYTES
        targets["idle memory"] = idle_ok
        rows.append(
            Row(
                "start-up",
                "ready / idle stack memory (PSS)",
                f"{secs(ready_s)} / {mib(idle)}",
                f"< {mib(IDLE_BUDGET_BYTES)}: {verdict(idle_ok)}",
            )
        )

        if not llm_only:
            # 1. End to end, offline skills, first, on the clean stack.
            report, _, _ = phase_end_to_end(
                stack,
                sampler,
                generator,
                label="1 e2e offline",
                prefix="p1-agent",
                agents=sizes.e2e_agents,
                per_agent=sizes.e2e_per_agent,
                timeout_s=sizes.e2e_timeout_s,
                rate_target=TARGET_E2E_RATE,
                p95_target=TARGET_E2E_P95_S,
            )
            _collect(report, rows, notes, targets)

            # 1b. The same pipeline fed a stream at the target rate: latency when it keeps up.
            _collect(phase_paced(stack, sampler, generator, sizes, label="1b e2e offline, paced"), rows, notes, targets)

            # 2. API acceptance, workers running.
            _collect(phase_acceptance(stack, sampler, generator, sizes, label="2 API"), rows, notes, targets)

        # 3. Against the LLM stub, batching off then on, each on a fresh database with more ingest
        # threads: a burst of batches, paced single messages, and the LoCoMo import.
        from tests.support.openai_stub import OpenAIStub

        model = StubModel(generator)
        stub = OpenAIStub(
            latency_s=STUB_LATENCY_S, chat_handler=model, default_dimensions=384, prefix_cache=True
        ).start()
        model.stub = stub
        llm_settings = {**LLM_SETTINGS, **dict(llm_env or {}), "ARANDU_LLM_BASE_URL": stub.base_url}
        with contextlib.ExitStack() as cleanup:
            code_root = cleanup.enter_context(checkout(baseline)) if baseline else None
            llm_sizes = dataclasses.replace(
                sizes,
                llm_per_agent=max(5, round(sizes.llm_per_agent * llm_fraction)),
                locomo_fraction=sizes.locomo_fraction * llm_fraction,
            )
            report = phase_llm_batching(
                stack,
                sampler,
                generator,
                llm_sizes,
                stub_url=stub.base_url,
                model=model,
                llm_env=dict(llm_env or {}),
                baseline=code_root,
            )
        before = (
            f"the service before issue 36 (commit {baseline}, run from a copy of its files, batching did not "
            "exist), then this code with "
            if baseline
            else ""
        )
        report.notes.insert(
            0,
            f"3 LLM stub: OpenAI-compatible stub in the benchmark process answering every call after "
            f"{STUB_LATENCY_S * 1000:.0f} ms (prompt tokens: a quarter of the characters of the messages and of a "
            "strict response_format's schema; cached: OpenAI's automatic prompt cache simulated on the stable prefix, "
            "the schema and system message, served when sent before and 1,024 tokens or more, in 128-token steps); "
            "processes restarted on a fresh database per mode with "
            + ", ".join(f"{name}={value}" for name, value in llm_settings.items() if name != "ARANDU_LLM_API_KEY")
            + f"; modes: {before}ARANDU_PIPELINE_LLM_BATCHING=false then true; batches and imports in chains of up to "
            f"{load_settings().chunk_size} events of one agent; batches of up to "
            f"{load_settings().pipeline_llm_batch_max_messages} messages of one agent and session "
            f"(~{load_settings().pipeline_llm_batch_max_tokens:,} prompt tokens) and of up to "
            f"{load_settings().pipeline_llm_reconcile_batch_max} reconciliation decisions of one agent "
            f"(~{load_settings().pipeline_llm_reconcile_batch_max_tokens:,} prompt tokens); paced single messages at "
            f"{LLM_PACED_RATE:.0f} msg/s.",
        )
        if llm_fraction != 1.0:
            report.notes.insert(
                1,
                f"3 LLM stub: at {llm_fraction:g} of full size (--llm-fraction, the machine being busy): "
                f"bursts of {llm_sizes.llm_per_agent} messages per agent, the first {llm_fraction:.0%} of each "
                "LoCoMo conversation; paced single messages at full size.",
            )
        _collect(report, rows, notes, targets)

        if not llm_only:
            # 4. Historical import of LoCoMo, offline settings, fresh database.
            restart_s = stack.restart(
                database="arandu_locomo",
                env=dict(env or {}),
                unset=[name for name in [*llm_settings, "ARANDU_PIPELINE_LLM_BATCHING"] if name not in (env or {})],
                flush_broker=True,
            )
            # Only now: workers still retrying phase 3 must not see the endpoint vanish.
            stub.stop()
            stub = None
            rows.append(Row("4 LoCoMo import", "restart offline on a fresh database", secs(restart_s)))
            report, _ = phase_locomo(stack, sampler, sizes, label="4 LoCoMo import")
            _collect(report, rows, notes, targets)

        peak = sampler.peak()
        peak_ok = peak < PEAK_BUDGET_BYTES
        targets["peak memory"] = peak_ok
        rows.append(
            Row("whole run", "peak stack memory (PSS)", mib(peak), f"< {mib(PEAK_BUDGET_BYTES)}: {verdict(peak_ok)}")
        )
        rows.append(Row("whole run", "wall time", secs(time.monotonic() - overall_started)))
        budget = "held" if idle_ok and peak_ok else "NOT held"
        notes.append(
            f"Memory budget (idle < {mib(IDLE_BUDGET_BYTES)}, peak < {mib(PEAK_BUDGET_BYTES)}): {budget} "
            f"(idle {mib(idle)}, peak {mib(peak)}; {sampler.count} samples every 0.5 s)."
        )
        missed = [name for name, held in targets.items() if not held]
        notes.append("Targets missed: " + ", ".join(missed) + "." if missed else "Every target was met.")
        top_statements = statements.top()
    except KeyboardInterrupt:
        print("\ninterrupted: stopping the stack...", file=sys.stderr, flush=True)
        code = 130
    except Exception as error:
        print(f"\nbenchmark failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        traceback.print_exc()
        tails = stack.log_tails()
        if tails:
            print(f"\nlogs of the stack's processes:\n{tails}", file=sys.stderr, flush=True)
        code = 1
    finally:
        with shielded():
            sampler.stop()
            if stub is not None:
                stub.stop()
            stack.stop()
    if code != 0:
        if rows:
            print(
                "\npartial figures (not recorded):\n" + text_table(("phase", "measure", "result", "target"), _t4(rows))
            )
        return code
    print("\n" + text_table(("phase", "measure", "result", "target"), _t4(rows)))
    print("\n" + "\n".join(f"- {note}" for note in notes))
    if top_statements:
        print(f"\n{TOP_STATEMENTS_TITLE}:\n" + "\n".join(top_statements))
    if record:
        append_results(
            _section(machine, command=command, quick=quick, stack_line=stack_line, load=load, rows=rows, notes=notes)
            + statements_block(top_statements)
        )
        print(f"\nappended to {Path('ops/bench/RESULTS.md')}")
    return 0


def _t4(rows: Iterable[Row]) -> list[tuple[str, str, str, str]]:
    return [(r.phase, r.measure, r.result, r.target) for r in rows]


def _collect(report: PhaseReport, rows: list[Row], notes: list[str], targets: dict[str, bool]) -> None:
    rows.extend(report.rows)
    notes.extend(report.notes)
    targets.update(report.targets)
