"""The retrieval benchmark: ``python -m ops.bench retrieve [--quick]`` (or ``./ops/bench/retrieve``).

On the real stack (:class:`~ops.bench.common.BenchStack`: API, worker pools, Beat, Flower,
embedded PostgreSQL 18 + pgvector and Redis in a fresh temporary ``ARANDU_HOME``), with the
defaults it states: no LLM (offline skills, so no reranker) and 384-dimension hashing
embeddings.

1. **Dataset.** One ``memory_facts`` table of 1,000,000 facts over 1,000 agents: four tested
   agents of 1k, 5k, 10k and 100k facts and 996 others sharing the rest (skewed sizes). Facts come
   from varied templates about the people of each agent (homes, jobs, studies, family, pets,
   hobbies, trips, concerts, dinners...), in the order production would have written them (the
   agents' rows interleaved over two years of valid_from / occurred_at, stored over the last
   two weeks: min_confidence filters on the confidence decayed since created_at, and a live
   agent's memory is mostly recent or confirmed). The tested agents also get what the write path
   would have stored with them: their messages as events, entities and aliases, fact-entity
   links and relationships with their evidence facts. Embeddings come from the real
   :class:`~memory_core.providers.hashing_embedder.HashingEmbedder`, computed in worker
   processes; rows are loaded with binary ``COPY`` while the secondary indexes of the two big
   tables are dropped, then rebuilt (``maintenance_work_mem`` 4GB and 2 parallel maintenance
   workers), then ``VACUUM ANALYZE``. There is no table-wide vector index: as the service's
   maintenance does, every agent with at least ``retrieval_agent_index_min_facts`` facts then
   gets its own partial HNSW and GIN indexes; the others are searched exactly. The database
   lives in the run's temporary home and serves the four sizes; it is removed at the end.
2. **Per tested agent** (200 fixed questions about its facts): in-process ``retrieve()`` latency
   with the per-stage timings of the verbose trace and the vector strategy the service chose;
   sequential latency through ``POST /v1/agents/{agent}/retrieve`` (the target); throughput
   with 16 concurrent HTTP clients; recall@10 of the semantic signal against an exact search.
3. **Diagnosis** at the largest size: ``EXPLAIN ANALYZE`` of the semantic statement and of a
   full signal statement.

``--quick`` is a smoke run at a tenth of the size (100k facts over 100 agents).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import math
import multiprocessing
import os
import random
import re
import struct
import sys
import threading
import time
import traceback
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil
import psycopg

from ops.bench.common import (
    BenchStack,
    CpuSnapshot,
    MachineInfo,
    MemorySampler,
    StatementStats,
    append_results,
    machine_info,
    markdown_table,
    mib,
    ms,
    percentile,
    secs,
    shielded,
    speed_probe_ms,
    stack_cpu_label,
    text_table,
    verdict,
)
from ops.bench.http_load import send_all
from ops.bench.ingest import PhaseReport, Row, Window

T = TypeVar("T")

TARGET_P50_S = 0.025
TARGET_P95_S = 0.060
TARGET_RECALL = 0.95
CONCURRENT_CLIENTS = 16
RECALL_K = 10
DIMENSIONS = 384
SEED = 20_241_130
# Index builds: what the brief of the benchmark asks for the bulk load.
BUILD_MAINTENANCE_WORK_MEM = "4GB"
BUILD_PARALLEL_WORKERS = 2
# Rows per chunk sent to an embedding worker, and chunks in flight.
CHUNK_ROWS = 2_000
CHUNKS_IN_FLIGHT = 6
PROGRESS_EVERY_S = 10.0
# created_at spans this many days, the newest an hour ago: at 0.95 a week of decay, facts stored
# at 0.95 or 0.80 keep passing min_confidence (0.55), the older 0.60 ones start to drop out.
STORED_DAYS = 14


@dataclass(frozen=True)
class Scale:
    """How big the dataset and the measurements are (a tenth with ``--quick``)."""

    agents: int = 1_000
    table_facts: int = 1_000_000
    # 5,000: the largest kind of agent still searched exactly (below retrieval_agent_index_min_facts).
    tested: tuple[int, ...] = (1_000, 5_000, 10_000, 100_000)
    queries: int = 200
    warmup_queries: int = 40
    throughput_s: float = 15.0
    throughput_warmup_s: float = 2.0
    control_requests: int = 1_500
    thread_load_s: float = 10.0

    @classmethod
    def quick(cls) -> Scale:
        """A tenth of the table, smaller agents and shorter measurements: a smoke run."""
        return cls(
            agents=100,
            table_facts=100_000,
            tested=(100, 500, 1_000, 10_000),
            queries=50,
            warmup_queries=10,
            throughput_s=4.0,
            throughput_warmup_s=1.0,
            control_requests=200,
            thread_load_s=3.0,
        )


# =====================================================================================
# Vocabulary
# =====================================================================================


def _words(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


FIRST_NAMES = _words(
    "Ana, Bruno, Camila, Diego, Eduarda, Felipe, Gabriela, Henrique, Isabela, Joao, Larissa, Lucas, Marina, "
    "Natalia, Otavio, Paula, Rafael, Sofia, Thiago, Vitoria, Alice, Ben, Chloe, Daniel, Emma, Frank, Grace, "
    "Henry, Isla, Jack, Kate, Liam, Mia, Noah, Olivia, Peter, Quinn, Ruby, Sam, Tara, Victor, Wendy, Zoe, "
    "Aaron, Bianca, Carlos, Dalia, Elias, Fatima, Gustavo, Helena, Igor, Julia, Karim, Lena, Mateus, Nadia, "
    "Oscar, Priya, Renato, Sara, Tomas, Ursula, Valentina, William, Ximena, Yuri, Zara, Amir, Beatriz, Caio, "
    "Dora, Enzo, Flora, Gael, Hana, Ivan, Jonas, Keiko, Leo, Maya, Nico, Olga, Pablo, Rosa, Simone, Teo, "
    "Uma, Vera, Walter, Yara, Adele, Boris, Clara, Dmitri, Elena, Fabio, Gloria, Hugo, Ines, Jorge, Kira, "
    "Lorenzo, Monica, Nora, Omar, Pietra, Rita, Stefan, Tessa, Ugo, Vanessa, Wagner, Xavier, Yasmin, Zeca"
)
LAST_NAMES = _words(
    "Silva, Souza, Costa, Oliveira, Pereira, Almeida, Ferreira, Rodrigues, Gomes, Martins, Araujo, Ribeiro, "
    "Carvalho, Rocha, Barbosa, Teixeira, Moreira, Cardoso, Mendes, Nunes, Smith, Johnson, Brown, Taylor, "
    "Anderson, Thomas, Moore, Martin, Jackson, Thompson, White, Harris, Clark, Lewis, Walker, Hall, Young, "
    "King, Wright, Hill, Green, Baker, Nelson, Carter, Mitchell, Roberts, Turner, Phillips, Campbell, Parker, "
    "Evans, Edwards, Collins, Stewart, Morris, Murphy, Cook, Rogers, Morgan, Cooper, Peterson, Reed, Bailey, "
    "Bell, Kelly, Howard, Ward, Cox, Richardson, Wood, Watson, Brooks, Bennett, Gray, James, Hughes, Price, "
    "Sanders, Myers, Long, Ross, Foster, Powell, Jenkins, Perry, Russell, Sullivan, Fisher, Henderson, "
    "Tanaka, Sato, Kowalski, Novak, Rossi, Bianchi, Moreau, Dubois, Schmidt, Muller, Weber, Lindqvist, "
    "Jensen, Nakamura, Haddad, Okafor, Mensah, Petrov, Ivanova, Garcia, Lopez, Navarro, Romero, Castro"
)
CITIES = _words(
    "Lisbon, Porto, Madrid, Barcelona, Valencia, Seville, Paris, Lyon, Marseille, Bordeaux, Berlin, Munich, "
    "Hamburg, Cologne, Vienna, Zurich, Geneva, Amsterdam, Rotterdam, Brussels, Antwerp, Copenhagen, Stockholm, "
    "Oslo, Helsinki, Dublin, Edinburgh, Glasgow, London, Manchester, Bristol, Rome, Milan, Naples, Florence, "
    "Turin, Athens, Prague, Warsaw, Krakow, Budapest, Bucharest, Istanbul, Cairo, Nairobi, Lagos, Accra, "
    "Cape Town, Johannesburg, Casablanca, Dubai, Mumbai, Delhi, Bangalore, Singapore, Bangkok, Hanoi, Manila, "
    "Jakarta, Seoul, Busan, Tokyo, Osaka, Kyoto, Sydney, Melbourne, Brisbane, Perth, Auckland, Wellington, "
    "Vancouver, Toronto, Montreal, Ottawa, Calgary, Seattle, Portland, San Francisco, Los Angeles, San Diego, "
    "Denver, Austin, Dallas, Houston, Chicago, Detroit, Boston, New York, Philadelphia, Atlanta, Miami, "
    "Mexico City, Guadalajara, Bogota, Medellin, Lima, Quito, Santiago, Buenos Aires, Montevideo, Sao Paulo, "
    "Rio de Janeiro, Belo Horizonte, Curitiba, Porto Alegre, Salvador, Recife, Fortaleza, Brasilia, Florianopolis"
)
_COMPANY_HEADS = _words(
    "North, Blue, Silver, Bright, Green, Iron, Red, Summit, Clear, Swift, Golden, Stone, Cedar, Harbor, Nova, "
    "Atlas, Orbit, Pixel, Quantum, Vertix"
)
_COMPANY_TAILS = _words("Labs, Systems, Foods, Health, Logistics, Analytics, Studios, Bank, Motors, Energy")
COMPANIES = tuple(f"{head} {tail}" for head in _COMPANY_HEADS for tail in _COMPANY_TAILS)
JOBS = _words(
    "software engineer, nurse, teacher, product designer, accountant, chef, data analyst, architect, "
    "pharmacist, lawyer, journalist, photographer, electrician, dentist, physiotherapist, pilot, "
    "marketing manager, sales representative, veterinarian, civil engineer, researcher, librarian, "
    "translator, project manager, graphic designer, social worker, barista, mechanic, firefighter, "
    "paramedic, economist, biologist, game developer, recruiter, copywriter, urban planner"
)
UNIVERSITIES = _words(
    "University of Lisbon, University of Porto, Sorbonne University, Humboldt University, University of Toronto, "
    "McGill University, University of Sydney, University of Tokyo, Seoul National University, "
    "University of Sao Paulo, University of Buenos Aires, Trinity College Dublin, University of Edinburgh, "
    "ETH Zurich, University of Amsterdam, University of Copenhagen, University of Cape Town, "
    "University of Michigan, University of Texas, Boston University, University of Washington, "
    "Delft University of Technology, University of Milan, University of Vienna"
)
SUBJECTS = _words(
    "computer science, nursing, economics, architecture, history, biology, chemistry, mechanical engineering, "
    "law, journalism, philosophy, mathematics, physics, psychology, graphic design, music, medicine, "
    "international relations, sociology, statistics, linguistics, civil engineering, marketing, literature"
)
HOBBIES = _words(
    "rock climbing, pottery, salsa dancing, chess, birdwatching, woodworking, knitting, surfing, "
    "trail running, photography, baking sourdough, gardening, playing the guitar, painting watercolors, "
    "cycling, yoga, scuba diving, bouldering, playing the piano, board games, fishing, skateboarding, "
    "calligraphy, origami, sailing, tennis, swimming, kayaking, crossword puzzles, podcasting, "
    "video games, stargazing, archery, beekeeping, camping, karaoke, horse riding, ice skating"
)
FOODS = _words(
    "sushi, ramen, tacos, pizza, pad thai, lasagna, pho, feijoada, paella, falafel, dumplings, curry, "
    "bibimbap, ceviche, moqueca, risotto, croissants, empanadas, gnocchi, shakshuka, pierogi, goulash, "
    "burritos, tiramisu, cheesecake, churros, acai bowls, fish and chips, pastel de nata, brigadeiro"
)
PET_KINDS = _words("dog, cat, parrot, rabbit, hamster, turtle, goldfish, ferret")
PET_NAMES = _words(
    "Biscuit, Max, Rex, Luna, Milo, Nala, Kiwi, Rio, Pipoca, Thor, Bolt, Mel, Simba, Cookie, Pepper, Oreo, "
    "Shadow, Coco, Loki, Bella, Ziggy, Mochi, Tofu, Peanut, Ginger, Olive, Pancho, Frida"
)
LANGUAGES = _words(
    "Spanish, Japanese, German, Italian, Portuguese, French, Korean, Mandarin, Arabic, Dutch, Swedish, "
    "Russian, Greek, Turkish, Hindi, Polish"
)
TEAMS = _words(
    "Benfica, Porto FC, Flamengo, Corinthians, Boca Juniors, River Plate, Barcelona FC, Real Madrid, "
    "Liverpool, Arsenal, Celtic, Ajax, Bayern, Juventus, the Lakers, the Celtics, the Yankees, the Red Sox"
)
BANDS = _words(
    "Radiohead, Coldplay, the Beatles, Queen, Daft Punk, Arctic Monkeys, Tame Impala, Gilberto Gil, "
    "Caetano Veloso, Fleetwood Mac, Pink Floyd, ABBA, Nirvana, Adele, Beyonce, Taylor Swift, Bad Bunny, "
    "Rosalia, Kendrick Lamar, Norah Jones, Miles Davis, Bach"
)
ALLERGENS = _words("peanuts, shellfish, gluten, lactose, pollen, cats, dust mites, penicillin, eggs, soy, bees")
ACTIVITIES = _words(
    "hiking, kayaking, camping, fishing, skiing, surfing, horse riding, rock climbing, cycling, sailing, "
    "bowling, ice skating, paddleboarding, snorkeling"
)
EVENT_KINDS = _words(
    "wedding, tech conference, music festival, book fair, jazz concert, art exhibition, food festival, "
    "film festival, charity gala, science fair, comedy show, wine tasting, trade show, hackathon, "
    "photography workshop, marathon, opera premiere, startup meetup, design summit, poetry reading"
)
RESTAURANTS = _words(
    "Casa Lumi, The Green Fork, Tasca do Ze, Blue Lotus, Nonna Rosa, Sakura House, El Fogon, Le Petit Four, "
    "The Copper Pot, Spice Route, Mar Azul, Bistro Verde, Golden Dragon, La Trattoria, The Old Mill, "
    "Taqueria Sol, Curry Leaf, Olive Tree, Harbor Grill, Kimchi Bar"
)
BOOKS = _words(
    "One Hundred Years of Solitude, The Little Prince, Dune, Sapiens, Pride and Prejudice, The Hobbit, "
    "Blindness, The Alchemist, Educated, Norwegian Wood, Beloved, The Road, Middlemarch, Dom Casmurro, "
    "The Name of the Rose, Project Hail Mary, Circe, Atomic Habits, The Overstory, Klara and the Sun"
)
FILMS = _words(
    "Parasite, Inception, Amelie, City of God, Spirited Away, The Godfather, Arrival, Interstellar, "
    "Roma, Central Station, Oppenheimer, Coco, Whiplash, Past Lives, The Grand Budapest Hotel"
)
SPORTS = _words("tennis, football, basketball, volleyball, padel, badminton, squash, table tennis, rugby, golf")
DRINKS = _words("coffee, green tea, black tea, mate, orange juice, kombucha, hot chocolate, espresso")
WORRIES = _words(
    "the rent going up, a job interview, their exams, a medical checkup, the team deadline, a leaking roof, "
    "their mother's health, the car repair bill, moving abroad, a difficult client"
)
ITEMS = _words(
    "bicycle, laptop, camera, espresso machine, sofa, pair of running shoes, telescope, electric guitar, "
    "standing desk, kayak, tent, e-reader, drone, sewing machine"
)
COURSES = _words(
    "Python, public speaking, photography, pottery, first aid, data science, Italian cooking, "
    "creative writing, UX design, woodworking, accounting, sign language"
)
HOLIDAYS = _words("Christmas, Easter, summer, New Year, Carnival, Thanksgiving, spring, autumn")
MONTHS = _words("January, February, March, April, May, June, July, August, September, October, November, December")
WEEKDAYS = _words("Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday")
SIBLING_WORDS = _words("sister, brother")
SPEAKERS_PER_AGENT = 3
# Importance of the seeds' categories (MemoryConfig.importance_category_map defaults).
IMPORTANCE = {
    "biographical_milestone": 0.95,
    "relationship_change": 0.90,
    "stable_preference": 0.75,
    "specific_event": 0.65,
    "routine_activity": 0.50,
}


# =====================================================================================
# A world per agent: its people, and the facts the write path would have stored
# =====================================================================================


def _slug_key(entity_type: str, name: str) -> str:
    from memory_core.write.naming import entity_key

    return entity_key(entity_type, name)


@dataclass
class Person:
    """Someone an agent knows about, with a stable profile the facts are drawn from."""

    name: str
    first: str
    key: str
    city: str
    old_city: str
    hometown: str
    company: str
    old_company: str
    job: str
    university: str
    subject: str
    allergen: str
    pet_kind: str
    pet_name: str
    language: str
    team: str
    band: str
    birth_year: int
    hobbies: tuple[str, ...]
    foods: tuple[str, ...]
    sibling_word: str
    partner: int
    sibling: int
    friend: int
    stable_done: int = 0


@dataclass(frozen=True)
class FactSpec:
    """One fact as the write path stores it, plus its entity links and the relation it states."""

    entity_type: str
    entity_key: str
    entity_name: str
    attribute_key: str | None
    text: str
    category: str
    links: tuple[tuple[str, str, str], ...]
    relation: tuple[str, str, str] | None
    superseded: bool = False


def _place(name: str) -> tuple[str, str, str]:
    return (_slug_key("place", name), "place", name)


def _org(name: str) -> tuple[str, str, str]:
    return (_slug_key("organization", name), "organization", name)


class AgentWorld:
    """The people of one agent (Zipf-weighted: a few appear in many facts) and a fact generator."""

    def __init__(self, agent_id: str, facts: int, seed: int) -> None:
        self.agent_id = agent_id
        self.rng = random.Random(seed)  # noqa: S311 - test data, not cryptography
        rng = self.rng
        count = max(12, min(5_000, facts // 25))
        combos = rng.sample(range(len(FIRST_NAMES) * len(LAST_NAMES)), count)
        self.people: list[Person] = []
        for combo in combos:
            first = FIRST_NAMES[combo // len(LAST_NAMES)]
            last = LAST_NAMES[combo % len(LAST_NAMES)]
            name = f"{first} {last}"
            self.people.append(
                Person(
                    name=name,
                    first=first,
                    key=_slug_key("person", name),
                    city=rng.choice(CITIES),
                    old_city=rng.choice(CITIES),
                    hometown=rng.choice(CITIES),
                    company=rng.choice(COMPANIES),
                    old_company=rng.choice(COMPANIES),
                    job=rng.choice(JOBS),
                    university=rng.choice(UNIVERSITIES),
                    subject=rng.choice(SUBJECTS),
                    allergen=rng.choice(ALLERGENS),
                    pet_kind=rng.choice(PET_KINDS),
                    pet_name=rng.choice(PET_NAMES),
                    language=rng.choice(LANGUAGES),
                    team=rng.choice(TEAMS),
                    band=rng.choice(BANDS),
                    birth_year=rng.randint(1950, 2005),
                    hobbies=tuple(rng.sample(HOBBIES, 3)),
                    foods=tuple(rng.sample(FOODS, 2)),
                    sibling_word=rng.choice(SIBLING_WORDS),
                    partner=rng.randrange(count),
                    sibling=rng.randrange(count),
                    friend=rng.randrange(count),
                )
            )
        weights = [1.0 / (rank + 1) ** 0.8 for rank in range(count)]
        total = sum(weights)
        running = 0.0
        self.cumulative: list[float] = []
        for weight in weights:
            running += weight / total
            self.cumulative.append(running)
        self.speakers = [person.name for person in self.people[:SPEAKERS_PER_AGENT]]

    def pick(self, rng: random.Random | None = None) -> int:
        """A person index, Zipf-weighted."""
        value = (rng or self.rng).random()
        return min(bisect.bisect_left(self.cumulative, value), len(self.people) - 1)

    def other(self, index: int) -> Person:
        """Someone other than person ``index``."""
        choice = self.pick()
        if choice == index:
            choice = (choice + 1) % len(self.people)
        return self.people[choice]

    def next_fact(self) -> FactSpec:
        """The next fact this agent learns: a stable profile fact first, events and likes after."""
        rng = self.rng
        index = self.pick()
        person = self.people[index]
        if person.stable_done < len(STABLE_STEPS) and (person.stable_done < 2 or rng.random() < 0.4):
            step = STABLE_STEPS[person.stable_done]
            person.stable_done += 1
            return _stable_fact(self, person, step)
        return rng.choice(_EVENTS)(self, index, person)


def _fact(  # noqa: PLR0917 - the templates read best with positional fields
    person: Person,
    attribute: str | None,
    text: str,
    category: str,
    links: Iterable[tuple[str, str, str]] = (),
    relation: tuple[str, str, str] | None = None,
    *,
    superseded: bool = False,
) -> FactSpec:
    return FactSpec(
        entity_type="person",
        entity_key=person.key,
        entity_name=person.name,
        attribute_key=attribute,
        text=text,
        category=category,
        links=tuple(links),
        relation=relation,
        superseded=superseded,
    )


def _person_link(person: Person) -> tuple[str, str, str]:
    return (person.key, "person", person.name)


# Stable facts, one each per person, in this order (the old home and job are superseded facts).
STABLE_STEPS = (
    "old_residence",
    "residence",
    "employer",
    "hometown",
    "education",
    "partner",
    "allergy",
    "pet",
    "sibling",
    "friend",
    "old_employer",
    "language",
    "team",
    "band",
    "birth",
)


def _stable_fact(w: AgentWorld, p: Person, step: str) -> FactSpec:
    if step == "old_residence":
        return _fact(
            p,
            "location.residence",
            f"{p.name} lives in {p.old_city}.",
            "stable_preference",
            [_place(p.old_city)],
            superseded=True,
        )
    if step == "residence":
        return _fact(
            p,
            "location.residence",
            f"{p.name} lives in {p.city}.",
            "stable_preference",
            [_place(p.city)],
            (p.key, _place(p.city)[0], "lives_in"),
        )
    if step == "employer":
        return _fact(
            p,
            "work.employer",
            f"{p.name} works at {p.company} as a {p.job}.",
            "relationship_change",
            [_org(p.company)],
            (p.key, _org(p.company)[0], "works_at"),
        )
    if step == "hometown":
        return _fact(
            p,
            "location.hometown",
            f"{p.name} grew up in {p.hometown}.",
            "biographical_milestone",
            [_place(p.hometown)],
            (p.key, _place(p.hometown)[0], "from"),
        )
    if step == "education":
        return _fact(
            p,
            "education",
            f"{p.name} studied {p.subject} at the {p.university}.",
            "biographical_milestone",
            [_org(p.university)],
            (p.key, _org(p.university)[0], "studied_at"),
        )
    if step in ("partner", "sibling", "friend"):
        other = w.people[getattr(p, step)]
        text, rel = {
            "partner": (f"{other.name} is the partner of {p.name}.", "partner_of"),
            "sibling": (f"{other.name} is the {p.sibling_word} of {p.name}.", "sibling_of"),
            "friend": (f"{other.name} is the best friend of {p.name}.", "friend_of"),
        }[step]
        attribute = {"partner": "relationship.partner", "sibling": "family.sibling", "friend": "relationship.friend"}
        category = "relationship_change" if step == "partner" else "stable_preference"
        return _fact(p, attribute[step], text, category, [_person_link(other)], (p.key, other.key, rel))
    if step == "allergy":
        return _fact(p, "health.condition", f"{p.name} is allergic to {p.allergen}.", "stable_preference")
    if step == "pet":
        return _fact(p, "pet", f"{p.name} has a {p.pet_kind} named {p.pet_name}.", "stable_preference")
    if step == "old_employer":
        return _fact(
            p,
            "work.employer",
            f"{p.name} used to work at {p.old_company}.",
            "relationship_change",
            [_org(p.old_company)],
            superseded=True,
        )
    if step == "language":
        return _fact(p, "goal.plan", f"{p.name} is learning {p.language}.", "routine_activity")
    if step == "team":
        return _fact(p, "preference.like", f"{p.name} supports {p.team}.", "stable_preference")
    if step == "band":
        return _fact(p, "preference.like", f"{p.name}'s favourite band is {p.band}.", "stable_preference")
    return _fact(p, "personal.birth_year", f"{p.name} was born in {p.birth_year}.", "biographical_milestone")


def _e_outing(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r, o, city = w.rng, w.other(i), w.rng.choice(CITIES)
    text = f"{p.name} went {r.choice(ACTIVITIES)} with {o.name} near {city} last {r.choice(MONTHS)}."
    return _fact(p, "event.activity", text, "specific_event", [_person_link(o), _place(city)])


def _e_attended(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r, city = w.rng, w.rng.choice(CITIES)
    text = f"{p.name} attended a {r.choice(EVENT_KINDS)} in {city} in {r.choice(MONTHS)} {r.randint(2019, 2025)}."
    return _fact(p, "event.activity", text, "specific_event", [_place(city)])


def _e_dinner(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r, o = w.rng, w.other(i)
    text = f"{p.name} had dinner with {o.name} at {r.choice(RESTAURANTS)} on {r.choice(WEEKDAYS)}."
    return _fact(p, "event.activity", text, "specific_event", [_person_link(o)])


def _e_hobby(w: AgentWorld, i: int, p: Person) -> FactSpec:
    hobby = w.rng.choice(p.hobbies)
    return _fact(p, "preference.like", f"{p.name} enjoys {hobby} on weekends.", "stable_preference")


def _e_food(w: AgentWorld, i: int, p: Person) -> FactSpec:
    return _fact(p, "preference.like", f"{p.name} loves {w.rng.choice(p.foods)}.", "stable_preference")


def _e_trip(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r, city = w.rng, w.rng.choice(CITIES)
    text = f"{p.name} is planning a trip to {city} in {r.choice(MONTHS)}."
    return _fact(p, "goal.plan", text, "specific_event", [_place(city)])


def _e_race(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r, city = w.rng, w.rng.choice(CITIES)
    text = f"{p.name} ran the {city} half marathon in {r.randint(95, 160)} minutes."
    return _fact(p, "event.activity", text, "specific_event", [_place(city)])


def _e_book(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r, o = w.rng, w.other(i)
    text = f"{p.name} read {r.choice(BOOKS)} and recommended it to {o.name}."
    return _fact(p, "event.activity", text, "specific_event", [_person_link(o)])


def _e_purchase(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r = w.rng
    text = f"{p.name} bought a new {r.choice(ITEMS)} for {r.randint(2, 180) * 10} dollars."
    return _fact(p, "event.activity", text, "specific_event")


def _e_visit(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r, o = w.rng, w.other(i)
    text = f"{p.name} visited {o.name} in {o.city} during the {r.choice(HOLIDAYS)} holidays."
    return _fact(p, "event.activity", text, "specific_event", [_person_link(o), _place(o.city)])


def _e_course(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r = w.rng
    text = f"{p.name} started a {r.choice(COURSES)} course at {p.company}."
    return _fact(p, "goal.plan", text, "routine_activity", [_org(p.company)])


def _e_moving(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r, o = w.rng, w.other(i)
    text = f"{p.name} helped {o.name} move to a new apartment in {o.city} in {r.choice(MONTHS)}."
    return _fact(p, "event.activity", text, "specific_event", [_person_link(o), _place(o.city)])


def _e_birthday(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r, o = w.rng, w.other(i)
    text = f"{p.name} celebrated the birthday of {o.name} at {r.choice(RESTAURANTS)}."
    return _fact(p, "event.activity", text, "specific_event", [_person_link(o)])


def _e_promotion(w: AgentWorld, i: int, p: Person) -> FactSpec:
    text = f"{p.name} got promoted to senior {p.job} at {p.company}."
    return _fact(p, "work.role", text, "relationship_change", [_org(p.company)])


def _e_adopted(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r = w.rng
    text = f"{p.name} adopted a {r.choice(PET_KINDS)} named {r.choice(PET_NAMES)} in {r.choice(MONTHS)}."
    return _fact(p, "pet", text, "relationship_change")


def _e_film(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r, o = w.rng, w.other(i)
    text = f"{p.name} watched {r.choice(FILMS)} with {o.name} at the cinema on {r.choice(WEEKDAYS)}."
    return _fact(p, "event.activity", text, "specific_event", [_person_link(o)])


def _e_worry(w: AgentWorld, i: int, p: Person) -> FactSpec:
    return _fact(p, "emotion.concern", f"{p.name} is worried about {w.rng.choice(WORRIES)}.", "specific_event")


def _e_drink(w: AgentWorld, i: int, p: Person) -> FactSpec:
    first, second = w.rng.sample(DRINKS, 2)
    return _fact(p, "preference.like", f"{p.name} prefers {first} over {second} in the morning.", "stable_preference")


def _e_volunteer(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r, o, city = w.rng, w.other(i), w.rng.choice(CITIES)
    text = f"{p.name} volunteered at the {city} food bank with {o.name} in {r.choice(MONTHS)}."
    return _fact(p, "event.activity", text, "specific_event", [_person_link(o), _place(city)])


def _e_sport(w: AgentWorld, i: int, p: Person) -> FactSpec:
    r, o = w.rng, w.other(i)
    text = f"{p.name} plays {r.choice(SPORTS)} with {o.name} every {r.choice(WEEKDAYS)} evening."
    return _fact(p, "routine.activity", text, "routine_activity", [_person_link(o)])


_EVENTS: tuple[Callable[[AgentWorld, int, Person], FactSpec], ...] = (
    _e_outing,
    _e_attended,
    _e_dinner,
    _e_hobby,
    _e_food,
    _e_trip,
    _e_race,
    _e_book,
    _e_purchase,
    _e_visit,
    _e_course,
    _e_moving,
    _e_birthday,
    _e_promotion,
    _e_adopted,
    _e_film,
    _e_worry,
    _e_drink,
    _e_volunteer,
    _e_sport,
)


# =====================================================================================
# Rows, binary COPY and the embedding workers
# =====================================================================================

# memory_facts and memory_events rows as the workers receive them (vectors are computed there).
# fact: (id, agent, entity_type, entity_key, entity_name, attribute_key, text, speaker, confidence,
#        importance, valid_from_us, valid_to_us | None, event_id | None, created_us)
# event: (id, agent, text, speaker, session_id, message_id, occurred_us, importance, created_us)
FactRow = tuple[Any, ...]
EventRow = tuple[Any, ...]

FACT_COPY = (
    "COPY memory_facts (id, agent_id, entity_type, entity_key, entity_name, attribute_key, fact_text, speaker, "
    "confidence, importance, valid_from, valid_to, invalidated_at, source_event_id, embedding_vec, created_at, "
    "ingested_at) FROM STDIN (FORMAT BINARY)"
)
EVENT_COPY = (
    "COPY memory_events (id, agent_id, text, speaker, session_id, message_id, source, occurred_at, importance, "
    "embedding_vec, created_at) FROM STDIN (FORMAT BINARY)"
)
COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
COPY_TRAILER = b"\xff\xff"
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_NULL = b"\xff\xff\xff\xff"
_I2 = struct.Struct(">h")
_I4 = struct.Struct(">i")
_F8 = struct.Struct(">d")
_I8 = struct.Struct(">q")
_VECTOR = struct.Struct(f">HH{DIMENSIONS}f")
_UUID_FIELD = _I4.pack(16)
_F8_FIELD = _I4.pack(8)
_VECTOR_FIELD = _I4.pack(_VECTOR.size)
_FACT_FIELDS = _I2.pack(17)
_EVENT_FIELDS = _I2.pack(11)
_SOURCE_FIELD = _I4.pack(6) + b"import"


def pg_micros(moment: datetime) -> int:
    """Microseconds since 2000-01-01 UTC: PostgreSQL's binary timestamptz."""
    delta = moment - _PG_EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _text(value: str | None) -> bytes:
    if value is None:
        return _NULL
    data = value.encode()
    return _I4.pack(len(data)) + data


def _uuid(value: bytes | None) -> bytes:
    return _NULL if value is None else _UUID_FIELD + value


def _micros(value: int | None) -> bytes:
    return _NULL if value is None else _F8_FIELD + _I8.pack(value)


def _float(value: float) -> bytes:
    return _F8_FIELD + _F8.pack(value)


_EMBEDDER: Any = None
_VECTOR_CACHE: dict[str, bytes] = {}
_VECTOR_CACHE_MAX = 60_000


def _worker_init() -> None:
    """Each worker process embeds with its own HashingEmbedder (the service's, unchanged)."""
    global _EMBEDDER  # noqa: PLW0603 - one embedder per worker process
    from memory_core.providers.hashing_embedder import HashingEmbedder

    _EMBEDDER = HashingEmbedder(DIMENSIONS)


def _vectors(texts: Sequence[str]) -> list[bytes]:
    """The packed vector field of every text: batched through ``embed()``, repeated texts reused."""
    found = {text: _VECTOR_CACHE.get(text) for text in texts}
    missing = [text for text, vector in found.items() if vector is None]
    if missing:
        for text, vector in zip(missing, _EMBEDDER.embed(missing), strict=True):
            found[text] = _VECTOR_FIELD + _VECTOR.pack(DIMENSIONS, 0, *vector)
        if len(_VECTOR_CACHE) + len(missing) > _VECTOR_CACHE_MAX:
            _VECTOR_CACHE.clear()
        _VECTOR_CACHE.update((text, found[text]) for text in missing)
    return [found[text] or b"" for text in texts]


def encode_facts(rows: Sequence[FactRow]) -> bytes:
    """Binary COPY tuples of ``rows`` for :data:`FACT_COPY` (embeddings computed here)."""
    out = bytearray()
    for row, vector in zip(rows, _vectors([row[6] for row in rows]), strict=True):
        fid, agent, etype, ekey, ename, attr, text, speaker, confidence, importance, start, end, event, created = row
        out += _FACT_FIELDS
        out += _uuid(fid)
        out += _text(agent)
        out += _text(etype)
        out += _text(ekey)
        out += _text(ename)
        out += _text(attr)
        out += _text(text)
        out += _text(speaker)
        out += _float(confidence)
        out += _float(importance)
        out += _micros(start)
        out += _micros(end)
        out += _micros(end)
        out += _uuid(event)
        out += vector
        out += _micros(created)
        out += _micros(created)
    return bytes(out)


def encode_events(rows: Sequence[EventRow]) -> bytes:
    """Binary COPY tuples of ``rows`` for :data:`EVENT_COPY` (embeddings computed here)."""
    out = bytearray()
    for row, vector in zip(rows, _vectors([row[2] for row in rows]), strict=True):
        eid, agent, text, speaker, session_id, message_id, occurred, importance, created = row
        out += _EVENT_FIELDS
        out += _uuid(eid)
        out += _text(agent)
        out += _text(text)
        out += _text(speaker)
        out += _text(session_id)
        out += _text(message_id)
        out += _SOURCE_FIELD
        out += _micros(occurred)
        out += _float(importance)
        out += vector
        out += _micros(created)
    return bytes(out)


def ordered_map(
    executor: ProcessPoolExecutor, function: Callable[[T], bytes], payloads: Iterable[T], in_flight: int
) -> Iterator[bytes]:
    """``function`` over ``payloads`` in worker processes, results in input order, at most ``in_flight`` queued."""
    pending: deque[Future[bytes]] = deque()
    for payload in payloads:
        pending.append(executor.submit(function, payload))
        if len(pending) >= in_flight:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


# =====================================================================================
# The dataset
# =====================================================================================


@dataclass
class TestedAgent:
    """An agent the benchmark queries, with what it knows and the questions asked about it."""

    agent_id: str
    size: int
    world: AgentWorld
    queries: list[str] = field(default_factory=list)
    facts: list[FactRow] = field(default_factory=list)
    specs: list[FactSpec] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)


@dataclass
class Dataset:
    """What was loaded and how long it took."""

    tested: list[TestedAgent]
    agents: int = 0
    facts: int = 0
    active_facts: int = 0
    events: int = 0
    links: int = 0
    entities: int = 0
    aliases: int = 0
    relationships: int = 0
    other_sizes: list[int] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    index_timings: list[tuple[str, float]] = field(default_factory=list)
    peaks: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)
    worker_cpu_s: float = 0.0


def tested_agent_id(size: int) -> str:
    """``bench-100k`` and the like."""
    return f"bench-{size // 1000}k" if size >= 1000 and size % 1000 == 0 else f"bench-{size}"


def _other_sizes(count: int, total: int, rng: random.Random) -> list[int]:
    """``count`` skewed agent sizes (log-normal, at least 20 facts) adding up to ``total``."""
    weights = [rng.lognormvariate(0.0, 1.1) for _ in range(count)]
    scale = (total - 20 * count) / sum(weights)
    sizes = [20 + int(weight * scale) for weight in weights]
    for index in range(total - sum(sizes)):
        sizes[index % count] += 1
    return sizes


def _confidence(rng: random.Random) -> float:
    roll = rng.random()
    if roll < 0.70:
        return 0.95
    if roll < 0.92:
        return 0.80
    return 0.60 if roll < 0.97 else 0.40


_MESSAGE_PREFIXES = ("", "", "Quick update: ", "Oh, and ", "Btw, ", "Also, ", "Good news: ", "FYI ")


class DatasetPlan:
    """Who owns each row of the table, in arrival order, and the generator of every row."""

    def __init__(self, scale: Scale, now: datetime) -> None:
        rng = random.Random(SEED)  # noqa: S311 - test data, not cryptography
        self.scale = scale
        self.now = now
        self.start = now - timedelta(days=730)
        self.tested = [
            TestedAgent(tested_agent_id(size), size, AgentWorld(tested_agent_id(size), size, SEED + size))
            for size in scale.tested
        ]
        others = scale.agents - len(self.tested)
        self.other_sizes = _other_sizes(others, scale.table_facts - sum(scale.tested), rng)
        self.agent_ids = [agent.agent_id for agent in self.tested] + [f"bench-agent-{i:04d}" for i in range(others)]
        sizes = list(scale.tested) + self.other_sizes
        self.worlds: list[AgentWorld | None] = [agent.world for agent in self.tested] + [None] * others
        self.seeds = [SEED + 7 * index for index in range(len(sizes))]
        self.sizes = sizes
        order = [index for index, size in enumerate(sizes) for _ in range(size)]
        rng.shuffle(order)
        self.order = order
        self.row_rng = random.Random(SEED + 1)  # noqa: S311 - test data, not cryptography

    def moment(self, position: int) -> int:
        """valid_from (microseconds) of the row at ``position``: arrival order is time order, over two years."""
        span = (self.now - self.start).total_seconds() - 3_600
        offset = span * position / max(len(self.order), 1)
        return pg_micros(self.start) + int(offset * 1_000_000)

    def stored(self, position: int) -> int:
        """created_at (microseconds) of the row at ``position``: within the last :data:`STORED_DAYS`, in arrival order.

        min_confidence filters on the confidence decayed since created_at (or the last
        confirmation): two years of created_at would leave a live agent's memory mostly filtered,
        which no agent in use looks like. What was said keeps its two years (valid_from, occurred_at).
        """
        span = STORED_DAYS * 86_400 - 3_600
        offset = span * position / max(len(self.order), 1)
        return pg_micros(self.now - timedelta(days=STORED_DAYS)) + int(offset * 1_000_000)

    def world(self, index: int) -> AgentWorld:
        world = self.worlds[index]
        if world is None:
            world = AgentWorld(self.agent_ids[index], self.sizes[index], self.seeds[index])
            self.worlds[index] = world
        return world

    def _row(
        self,
        index: int,
        spec: FactSpec,
        moment: int,
        stored: int,
        *,
        speaker: str,
        event: bytes | None,
        rng: random.Random,
    ) -> FactRow:
        valid_to = None
        if spec.superseded:
            now = pg_micros(self.now)
            valid_to = min(moment + rng.randint(20, 400) * 86_400_000_000, now - 3_600_000_000)
            valid_to = max(valid_to, moment + 1_000_000)
        return (
            uuid.uuid4().bytes,
            self.agent_ids[index],
            spec.entity_type,
            spec.entity_key,
            spec.entity_name,
            spec.attribute_key,
            spec.text,
            speaker,
            _confidence(rng),
            IMPORTANCE[spec.category],
            moment,
            valid_to,
            event,
            stored + rng.randint(500_000, 5_000_000),
        )

    def prepare_tested(self) -> None:
        """The tested agents' facts and messages, ahead of the load (events must exist before facts)."""
        positions: dict[int, list[int]] = {index: [] for index in range(len(self.tested))}
        for position, index in enumerate(self.order):
            if index < len(self.tested):
                positions[index].append(position)
        for index, agent in enumerate(self.tested):
            rng = random.Random(SEED + 31 * agent.size)  # noqa: S311 - test data, not cryptography
            slots = positions[index]
            cursor = 0
            message = 0
            while cursor < len(slots):
                take = min(1 if rng.random() < 0.6 else 2, len(slots) - cursor)
                moment = self.moment(slots[cursor])
                stored = self.stored(slots[cursor])
                speaker = rng.choice(agent.world.speakers)
                event_id = uuid.uuid4().bytes
                specs = [agent.world.next_fact() for _ in range(take)]
                texts = " ".join(spec.text for spec in specs)
                agent.events.append(
                    (
                        event_id,
                        agent.agent_id,
                        rng.choice(_MESSAGE_PREFIXES) + texts,
                        speaker,
                        f"session-{message // 30:05d}",
                        f"msg-{message:06d}",
                        moment,
                        0.5,
                        stored,
                    )
                )
                for spec in specs:
                    agent.specs.append(spec)
                    agent.facts.append(self._row(index, spec, moment, stored, speaker=speaker, event=event_id, rng=rng))
                cursor += take
                message += 1

    def fact_chunks(self, rows_per_chunk: int) -> Iterator[list[FactRow]]:
        """Every fact of the table in arrival order, in chunks (other agents' facts generated here)."""
        cursors = [0] * len(self.tested)
        chunk: list[FactRow] = []
        rng = self.row_rng
        for position, index in enumerate(self.order):
            if index < len(self.tested):
                chunk.append(self.tested[index].facts[cursors[index]])
                cursors[index] += 1
            else:
                world = self.world(index)
                spec = world.next_fact()
                chunk.append(
                    self._row(
                        index,
                        spec,
                        self.moment(position),
                        self.stored(position),
                        speaker=world.speakers[0],
                        event=None,
                        rng=rng,
                    )
                )
            if len(chunk) >= rows_per_chunk:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


_SECONDARY_INDEXES_SQL = """
SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS definition,
       c.relname AS table_name, am.amname AS method
FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_am am ON am.oid = ic.relam
WHERE c.relname = ANY(%s) AND NOT i.indisprimary
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
ORDER BY c.relname, i.indexrelid::regclass::text
"""
BULK_TABLES = ["memory_events", "memory_facts"]


def _progress(label: str, done: int, total: int, started: float, last: list[float]) -> None:
    now = time.monotonic()
    if now - last[0] >= PROGRESS_EVERY_S or done >= total:
        rate = done / (now - started) if now > started else 0.0
        print(f"  {label}: {done:,}/{total:,} rows, {now - started:.0f} s, ~{rate:,.0f} rows/s", flush=True)
        last[0] = now


def _copy_binary(
    conn: psycopg.Connection[Any], statement: str, blobs: Iterable[bytes], *, label: str, total: int, rows: int
) -> None:
    started = time.monotonic()
    last = [started]
    done = 0
    with conn.cursor() as cursor, cursor.copy(statement) as copy:
        copy.write(COPY_SIGNATURE)
        for blob in blobs:
            copy.write(blob)
            done += rows
            _progress(label, min(done, total), total, started, last)
        copy.write(COPY_TRAILER)


def _chunks(rows: Sequence[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(rows), size):
        yield list(rows[start : start + size])


def _graph_rows(plan: DatasetPlan) -> tuple[list[tuple[Any, ...]], ...]:
    """Entities, aliases, fact-entity links and relationships of the tested agents, as the write path keeps them."""
    entities: list[tuple[Any, ...]] = []
    aliases: list[tuple[Any, ...]] = []
    links: list[tuple[Any, ...]] = []
    edges: list[tuple[Any, ...]] = []
    rng = random.Random(SEED + 3)  # noqa: S311 - test data, not cryptography
    for agent in plan.tested:
        known: dict[str, tuple[str, str]] = {}
        counts: Counter[str] = Counter()
        seen: dict[str, list[int]] = {}
        relations: dict[tuple[str, str, str], tuple[bytes, int]] = {}
        for row, spec in zip(agent.facts, agent.specs, strict=True):
            fact_id, moment, active = row[0], row[10], row[11] is None
            keys = {spec.entity_key: (spec.entity_type, spec.entity_name)}
            for key, entity_type, name in spec.links:
                keys.setdefault(key, (entity_type, name))
            for key, (entity_type, name) in keys.items():
                links.append((uuid.UUID(bytes=fact_id), key, key == spec.entity_key, agent.agent_id))
                known.setdefault(key, (entity_type, name))
                counts[key] += 1 if active else 0
                span = seen.setdefault(key, [moment, moment])
                span[0], span[1] = min(span[0], moment), max(span[1], moment)
            if spec.relation and active:
                relations.setdefault(spec.relation, (fact_id, moment))
        most = max(counts.values(), default=1)
        for key, (entity_type, name) in known.items():
            first, last = seen[key]
            importance = round(math.log1p(counts[key]) / math.log1p(most), 4)
            entities.append(
                (
                    agent.agent_id,
                    key,
                    name,
                    entity_type,
                    counts[key],
                    importance,
                    _PG_EPOCH + timedelta(microseconds=first),
                    _PG_EPOCH + timedelta(microseconds=last),
                )
            )
        taken: dict[str, str] = {}
        # People are listed most-mentioned first: a first name alone points at the best-known person.
        for person in agent.world.people:
            for alias in (person.name, person.first):
                taken.setdefault(normalize(alias), person.key)
        for key, (entity_type, name) in known.items():
            if entity_type != "person":
                taken.setdefault(normalize(name), key)
        for alias, key in taken.items():
            if key in known:
                aliases.append((agent.agent_id, alias, key, known[key][0]))
        for (source, target, rel_type), (fact_id, moment) in relations.items():
            strength = round(rng.uniform(0.55, 1.0), 3)
            edges.append(
                (
                    agent.agent_id,
                    source,
                    target,
                    rel_type,
                    strength,
                    uuid.UUID(bytes=fact_id),
                    "llm",
                    _PG_EPOCH + timedelta(microseconds=moment),
                )
            )
    return entities, aliases, links, edges


def normalize(alias: str) -> str:
    """Aliases as the write path stores them."""
    from memory_core.write.naming import normalize_alias

    return normalize_alias(alias)


def _copy_rows(conn: psycopg.Connection[Any], statement: str, rows: Iterable[Sequence[Any]]) -> None:
    with conn.cursor() as cursor, cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row(row)


def _embedding_workers_cpu() -> float:
    """CPU seconds used so far by this process's spawned pool workers (not part of the stack)."""
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any("spawn_main" in part for part in child.cmdline()):
                times = child.cpu_times()
                total += float(times.user + times.system)
    return total


def build_dataset(database_url: str, scale: Scale, sampler: MemorySampler, workers: int) -> Dataset:
    """Generate, embed and load the table, rebuild its indexes, ``VACUUM ANALYZE``; figures of every step."""
    now = datetime.now(UTC)
    started = time.monotonic()
    plan = DatasetPlan(scale, now)
    plan.prepare_tested()
    dataset = Dataset(tested=plan.tested, agents=len(plan.agent_ids), other_sizes=plan.other_sizes)
    dataset.timings["generate tested agents"] = time.monotonic() - started
    context = multiprocessing.get_context("spawn")
    with (
        psycopg.connect(database_url, autocommit=True) as conn,
        ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_worker_init) as executor,
    ):
        dataset.settings = {
            name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
            for name in ("shared_buffers", "work_mem", "max_wal_size", "max_worker_processes", "effective_cache_size")
        }
        dataset.settings["pgvector"] = str(
            conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]  # type: ignore[index]
        )
        indexes = conn.execute(_SECONDARY_INDEXES_SQL, (BULK_TABLES,)).fetchall()
        for name, _definition, _table, _method in indexes:
            conn.execute(f"DROP INDEX {name}")
        print(f"  dropped {len(indexes)} secondary indexes of {', '.join(BULK_TABLES)} for the load", flush=True)

        # 1. The tested agents' messages (facts reference them).
        moment = time.monotonic()
        events = [row for agent in plan.tested for row in agent.events]
        blobs = ordered_map(executor, encode_events, _chunks(events, CHUNK_ROWS), CHUNKS_IN_FLIGHT)
        _copy_binary(conn, EVENT_COPY, blobs, label="events", total=len(events), rows=CHUNK_ROWS)
        dataset.events = len(events)
        dataset.timings["events COPY"] = time.monotonic() - moment

        # 2. Every fact, in arrival order.
        moment = time.monotonic()
        blobs = ordered_map(executor, encode_facts, plan.fact_chunks(CHUNK_ROWS), CHUNKS_IN_FLIGHT)
        _copy_binary(conn, FACT_COPY, blobs, label="facts", total=len(plan.order), rows=CHUNK_ROWS)
        dataset.facts = len(plan.order)
        dataset.timings["facts COPY"] = time.monotonic() - moment
        dataset.peaks["load"] = sampler.peak(started, time.monotonic())
        dataset.worker_cpu_s = _embedding_workers_cpu()

    # 3. The tested agents' graph: entities, aliases, links, relationships.
    moment = time.monotonic()
    entities, aliases, links, edges = _graph_rows(plan)
    with psycopg.connect(database_url, autocommit=True) as conn:
        _copy_rows(
            conn,
            "COPY memory_entities (agent_id, canonical_key, display_name, entity_type, fact_count, importance_score, "
            "first_seen_at, last_seen_at) FROM STDIN",
            entities,
        )
        _copy_rows(
            conn,
            "COPY memory_entity_aliases (agent_id, alias, canonical_entity_key, canonical_entity_type) FROM STDIN",
            aliases,
        )
        _copy_rows(conn, "COPY memory_fact_entity_links (fact_id, entity_key, is_primary, agent_id) FROM STDIN", links)
        _copy_rows(
            conn,
            "COPY memory_entity_relationships (agent_id, source_entity_key, target_entity_key, rel_type, strength, "
            "evidence_fact_id, provenance, valid_from) FROM STDIN",
            edges,
        )
    dataset.entities, dataset.aliases, dataset.links, dataset.relationships = (
        len(entities),
        len(aliases),
        len(links),
        len(edges),
    )
    dataset.timings["graph tables COPY"] = time.monotonic() - moment

    # 4. The indexes, with the memory and workers a bulk build deserves. (No vector index among
    # them: the per-agent partial ones are built after the load, by build_agent_indexes.)
    moment = time.monotonic()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"SET maintenance_work_mem = '{BUILD_MAINTENANCE_WORK_MEM}'")
        conn.execute(f"SET max_parallel_maintenance_workers = {BUILD_PARALLEL_WORKERS}")
        for name, definition, table, method in indexes:
            print(f"  building {name} ({method} on {table})...", flush=True)
            begun = time.monotonic()
            conn.execute(definition)
            dataset.index_timings.append((f"{name} ({method})", time.monotonic() - begun))
    dataset.timings["index rebuild"] = time.monotonic() - moment
    dataset.peaks["index rebuild"] = sampler.peak(moment, time.monotonic())

    # 5. What autovacuum would have done by now: hint bits, visibility map, statistics.
    moment = time.monotonic()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "VACUUM (ANALYZE) memory_facts, memory_events, memory_fact_entity_links, memory_entities, "
            "memory_entity_aliases, memory_entity_relationships"
        )
        dataset.active_facts = int(
            conn.execute("SELECT count(*) FROM memory_facts WHERE valid_to IS NULL").fetchone()[0]  # type: ignore[index]
        )
        for relation in ("memory_facts", "memory_events"):
            size = conn.execute("SELECT pg_total_relation_size(%s::regclass)", (relation,)).fetchone()
            dataset.sizes[relation] = int(size[0]) if size else 0
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        dataset.sizes["database"] = int(size[0]) if size else 0
    dataset.timings["vacuum analyze"] = time.monotonic() - moment
    dataset.timings["total"] = time.monotonic() - started
    dataset.peaks["dataset"] = sampler.peak(started, time.monotonic())
    return dataset


# =====================================================================================
# Questions
# =====================================================================================

_STEP_QUESTIONS: dict[str, tuple[str, ...]] = {
    "old_residence": ("Where did {n} live before?",),
    "residence": ("Where does {n} live?", "Which city is {n} living in now?", "Does {n} still live in {city}?"),
    "employer": ("Where does {n} work?", "What does {n} do for a living?", "Who is {n}'s employer?"),
    "hometown": ("Where did {n} grow up?", "Which city is {n} originally from?"),
    "education": ("What did {n} study?", "Which university did {n} go to?"),
    "partner": ("Who is {n}'s partner?", "Is {n} in a relationship?"),
    "allergy": ("Is {n} allergic to anything?", "What should I avoid cooking for {n}?"),
    "pet": ("What is the name of {n}'s {pet}?", "Does {n} have any pets?"),
    "sibling": ("Who is {n}'s {sibling}?", "Does {n} have siblings?"),
    "friend": ("Who is {n}'s best friend?",),
    "old_employer": ("Where did {n} work before {company}?",),
    "language": ("Which language is {n} learning?",),
    "team": ("Which team does {n} support?",),
    "band": ("What music does {n} like?", "What is {n}'s favourite band?"),
    "birth": ("When was {n} born?", "How old is {n}?"),
}
_ANY_PERSON_QUESTIONS = (
    "What are {n}'s hobbies?",
    "What food does {n} love?",
    "What has {n} been up to lately?",
    "Who did {n} have dinner with?",
    "Did {n} travel anywhere recently?",
    "What is {n} worried about?",
    "Which events did {n} attend?",
    "What sports does {n} play?",
    "What did {n} buy recently?",
    "What books has {n} been reading?",
    "Who went {activity} with {n}?",
)
_PLACE_QUESTIONS = (
    "Who lives in {city}?",
    "Who works at {company}?",
    "What happened in {city} in {month}?",
    "Which of my contacts grew up in {city}?",
    "Who studied at the {university}?",
    "Who ran the {city} half marathon?",
)
_AGGREGATE_QUESTIONS = (
    "Who are my friends?",
    "Tell me about my family.",
    "Which of my colleagues work at {company}?",
    "List the pets of the people I know.",
)
_BROAD_QUESTIONS = ("Tell me everything you know about {n}.",)


def make_queries(world: AgentWorld, count: int, seed: int) -> list[str]:
    """``count`` fixed questions about what ``world`` holds: its people (mostly the often-mentioned), places, groups."""
    rng = random.Random(seed)  # noqa: S311 - test data, not cryptography
    queries: list[str] = []
    while len(queries) < count:
        index = world.pick(rng) if rng.random() < 0.7 else rng.randrange(len(world.people))
        person = world.people[index]
        name = person.name if rng.random() < 0.5 else person.first
        values = {
            "n": name,
            "city": person.city,
            "company": person.company,
            "pet": person.pet_kind,
            "sibling": person.sibling_word,
            "activity": rng.choice(ACTIVITIES),
            "month": rng.choice(MONTHS),
            "university": person.university,
        }
        roll = rng.random()
        if roll < 0.45 and person.stable_done > 0:
            template = rng.choice(_STEP_QUESTIONS[STABLE_STEPS[rng.randrange(person.stable_done)]])
        elif roll < 0.75:
            template = rng.choice(_ANY_PERSON_QUESTIONS)
        elif roll < 0.90:
            template = rng.choice(_PLACE_QUESTIONS)
        elif roll < 0.97:
            template = rng.choice(_AGGREGATE_QUESTIONS)
        else:
            template = rng.choice(_BROAD_QUESTIONS)
        query = template.format(**values)
        if query not in queries:
            queries.append(query)
    return queries


# =====================================================================================
# Measuring
# =====================================================================================


@dataclass
class ThreadLoad:
    """``retrieve()`` from concurrent threads of this process, with the traces' stage timings."""

    rate: float = math.nan
    latencies: list[float] = field(default_factory=list)
    stage_ms: dict[str, list[float]] = field(default_factory=dict)
    not_recorded: int = 0


@dataclass
class SizeResult:
    """Figures of one tested agent."""

    agent: TestedAgent
    inprocess: list[float] = field(default_factory=list)
    stage_ms: dict[str, list[float]] = field(default_factory=dict)
    strategies: Counter[str] = field(default_factory=Counter)
    candidates: list[int] = field(default_factory=list)
    facts_returned: list[int] = field(default_factory=list)
    http: list[float] = field(default_factory=list)
    http_errors: list[str] = field(default_factory=list)
    load_latencies: list[float] = field(default_factory=list)
    load_errors: list[str] = field(default_factory=list)
    load_rate: float = math.nan
    load_client_cpu_ms: float = math.nan
    # CPU per retrieve by process over the httpx load (warm-up included) and over the control.
    load_cpu: str = ""
    control_cpu: str = ""
    # The whole stack's CPU per retrieve (the benchmark process apart), over the same two loads.
    load_stack_cpu: str = ""
    control_stack_cpu: str = ""
    control_rate: float = math.nan
    control_latencies: list[float] = field(default_factory=list)
    control_errors: list[str] = field(default_factory=list)
    recall: list[float] = field(default_factory=list)
    recall_strategies: Counter[str] = field(default_factory=Counter)
    semantic_ms: list[float] = field(default_factory=list)
    exact_ms: list[float] = field(default_factory=list)
    agent_facts_counted: int = 0
    active_facts: int = 0
    load_average: float = 0.0
    # The speed probe (ops.bench.common) just before the 16-client load: hosts drift within a run.
    load_speed_probe_ms: float = math.nan
    threads: dict[str, ThreadLoad] = field(default_factory=dict)
    peaks: dict[str, int] = field(default_factory=dict)
    walls: dict[str, float] = field(default_factory=dict)
    window_notes: list[str] = field(default_factory=list)


def _body(query: str) -> bytes:
    return json.dumps({"query": query}, ensure_ascii=False).encode()


def measure_inprocess(ctx: Any, result: SizeResult, queries: Sequence[str], *, record: bool) -> None:
    """``retrieve()`` in this process with ``verbose``: latency, per-stage timings, the strategy chosen."""
    from memory_core.read import retrieve

    for query in queries:
        started = time.perf_counter()
        answer = retrieve(ctx, agent_id=result.agent.agent_id, query=query, verbose=True)
        elapsed = time.perf_counter() - started
        if not record:
            continue
        result.inprocess.append(elapsed)
        trace = answer.trace or {}
        for stage, value in (trace.get("timings_ms") or {}).items():
            result.stage_ms.setdefault(stage, []).append(float(value))
        retrieval = trace.get("retrieval") or {}
        result.strategies[str(retrieval.get("vector_strategy", "none"))] += 1
        result.agent_facts_counted = max(result.agent_facts_counted, int(retrieval.get("agent_facts_counted") or 0))
        result.candidates.append(answer.total_candidates)
        result.facts_returned.append(len(answer.facts))
        if answer.warnings:
            result.http_errors.append(f"in-process warnings: {answer.warnings[:2]}")


def measure_inprocess_concurrent(
    ctx: Any, agent_id: str, queries: Sequence[str], *, threads: int, seconds: float, bookkeeping: bool = True
) -> ThreadLoad:
    """``threads`` threads calling ``retrieve()`` (verbose) for ``seconds``; ``bookkeeping=False`` is a what-if.

    Without bookkeeping, the read pipeline's ``record_retrievals`` is replaced by a no-op *in this
    process only* for the duration of the measurement: it shows what retrieval costs when the
    counters are written elsewhere. The service's code is not changed.
    """
    import memory_core.read.pipeline as read_pipeline
    from memory_core.read import retrieve

    load = ThreadLoad()
    lock = threading.Lock()
    original = read_pipeline.record_retrievals
    until = time.perf_counter() + seconds

    def worker(offset: int) -> None:
        index = offset
        while time.perf_counter() < until:
            started = time.perf_counter()
            answer = retrieve(ctx, agent_id=agent_id, query=queries[index % len(queries)], verbose=True)
            elapsed = time.perf_counter() - started
            trace = answer.trace or {}
            with lock:
                load.latencies.append(elapsed)
                for stage, value in (trace.get("timings_ms") or {}).items():
                    load.stage_ms.setdefault(stage, []).append(float(value))
                if (trace.get("bookkeeping") or {}).get("recorded") is False:
                    load.not_recorded += 1
            index += threads

    if not bookkeeping:
        read_pipeline.record_retrievals = lambda *_args, **_kwargs: True
    try:
        started = time.perf_counter()
        workers = [threading.Thread(target=worker, args=(offset,), daemon=True) for offset in range(threads)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        wall = time.perf_counter() - started
    finally:
        read_pipeline.record_retrievals = original
    load.rate = len(load.latencies) / wall if wall > 0 else math.nan
    return load


def measure_http_sequential(stack: BenchStack, result: SizeResult, queries: Sequence[str]) -> None:
    """One keep-alive client, one request at a time: the latency a caller sees."""
    path = f"/v1/agents/{result.agent.agent_id}/retrieve"
    with httpx.Client(base_url=stack.api_url, headers=stack.json_headers, timeout=60.0) as client:
        for query in queries:
            started = time.perf_counter()
            response = client.post(path, content=_body(query))
            result.http.append(time.perf_counter() - started)
            if response.status_code != 200:
                result.http_errors.append(f"{response.status_code}: {response.text[:200]}")


async def _concurrent_load(
    stack: BenchStack, path: str, queries: Sequence[str], *, clients: int, warmup_s: float, measure_s: float
) -> tuple[list[float], list[str], float, int]:
    """Latencies and errors of the requests inside the measure window, its length, and every answer counted.

    The last figure counts the warm-up's answers too: it is what the CPU spent over the whole load
    is divided by.
    """
    headers = stack.json_headers
    bodies = [_body(query) for query in queries]
    latencies: list[float] = []
    errors: list[str] = []
    answered = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=stack.api_url, headers=headers, timeout=60.0, limits=limits) as client:
        begin = time.perf_counter()
        measure_from = begin + warmup_s
        until = measure_from + measure_s

        async def worker(offset: int) -> None:
            nonlocal answered
            index = offset
            while True:
                started = time.perf_counter()
                if started >= until:
                    return
                try:
                    response = await client.post(path, content=bodies[index % len(bodies)])
                    status = response.status_code
                    detail = response.text[:200] if status != 200 else ""
                except httpx.HTTPError as error:
                    status, detail = 0, f"{type(error).__name__}: {error}"
                finished = time.perf_counter()
                index += clients
                answered += 1
                if started >= measure_from and finished <= until:
                    latencies.append(finished - started)
                    if status != 200:
                        errors.append(f"{status}: {detail}")

        await asyncio.gather(*(worker(offset) for offset in range(clients)))
    return latencies, errors, measure_s, answered


def measure_http_concurrent(stack: BenchStack, result: SizeResult, scale: Scale) -> None:
    """Retrieves/s with 16 concurrent keep-alive httpx clients, then the same load from the low-CPU client."""

    path = f"/v1/agents/{result.agent.agent_id}/retrieve"
    queries = result.agent.queries
    before = stack.cpu_snapshot()
    latencies, errors, window, answered = asyncio.run(
        _concurrent_load(
            stack,
            path,
            queries,
            clients=CONCURRENT_CLIENTS,
            warmup_s=scale.throughput_warmup_s,
            measure_s=scale.throughput_s,
        )
    )
    after = stack.cpu_snapshot()
    spent = after.since(before).get("benchmark process", 0.0)
    result.load_latencies, result.load_errors = latencies, errors
    result.load_rate = len(latencies) / window if window > 0 else math.nan
    result.walls["load window"] = window
    # Over the warm-up too, so divided by every answer (the warm-up's included).
    result.load_client_cpu_ms = spent / max(answered, 1) * 1000.0
    result.load_cpu = _cpu_per_retrieve(before, after, answered)
    result.load_stack_cpu = after.stack_cpu_cell(before, answered, "retrieve")
    count = max(CONCURRENT_CLIENTS * 4, min(scale.control_requests, int(result.load_rate * scale.throughput_s)))
    requests = [(path, _body(queries[i % len(queries)])) for i in range(count)]
    before = stack.cpu_snapshot()
    started = time.perf_counter()
    control = asyncio.run(
        send_all(stack.api_url, stack.json_headers, requests, concurrency=CONCURRENT_CLIENTS, expect=200)
    )
    wall = time.perf_counter() - started
    result.control_latencies, result.control_errors = control.latencies, control.errors
    result.control_rate = len(control.latencies) / wall if wall > 0 else math.nan
    after = stack.cpu_snapshot()
    result.control_cpu = _cpu_per_retrieve(before, after, len(control.latencies))
    result.control_stack_cpu = after.stack_cpu_cell(before, len(control.latencies), "retrieve")


def _cpu_per_retrieve(before: CpuSnapshot, after: CpuSnapshot, answered: int) -> str:
    """CPU per answered retrieve by process (ms), and how busy the machine's cores were meanwhile."""
    window = after.taken_at - before.taken_at
    busy = (after.machine_busy - before.machine_busy) / window if window > 0 else math.nan
    return f"{after.per_item_since(before, answered)}; cores busy {busy * 100:.0f}% of {(os.cpu_count() or 1) * 100}%"


_EXACT_TOPK_SQL = """
SELECT 1 - (f.embedding_vec <=> CAST(%(vec)s AS vector)) AS similarity
FROM memory_facts f
WHERE f.agent_id = %(agent)s AND f.valid_to IS NULL AND f.confidence >= %(min_confidence)s
  AND (%(confidence_floor)s >= %(min_confidence)s
       OR f.confidence * power(%(confidence_decay)s, GREATEST(0.0, date_part('epoch', now()
           - GREATEST(f.created_at, f.last_confirmed_at)) / 604800.0)) >= %(min_confidence)s)
  AND f.embedding_vec IS NOT NULL
ORDER BY (f.embedding_vec <=> CAST(%(vec)s AS vector)) + 0, f.id
LIMIT %(k)s
"""


def recall_at_k(service: Sequence[float], exact: Sequence[float], k: int, min_similarity: float) -> float | None:
    """Tie-aware recall@k of the service's top-k similarities against the exact top-k (above ``min_similarity``).

    Template facts repeat, so equal vectors tie; a returned fact counts when it is at least as
    similar as the k-th exact neighbour. ``None`` when the exact search has nothing above the threshold.
    """
    truth = [value for value in exact[:k] if value >= min_similarity]
    if not truth:
        return None
    threshold = truth[-1] - 1e-6
    hits = sum(1 for value in service[:k] if value >= threshold)
    return min(hits, len(truth)) / len(truth)


def measure_recall(ctx: Any, database_url: str, result: SizeResult, queries: Sequence[str]) -> None:
    """The semantic signal as the service runs it (agent index, or strategy by count; guard) against an exact scan."""
    from sqlalchemy import text as sql

    from memory_core.read.entities import resolve_query_context
    from memory_core.read.signals import EXACT_SCAN_MAX_FACTS, SignalRequest, run_signals
    from memory_core.write.repository import vector_literal

    config = ctx.base_config
    agent = result.agent.agent_id
    with psycopg.connect(database_url, autocommit=True) as conn:
        for query in queries:
            vector = ctx.embedder.embed_one(query)
            if vector is None:
                continue
            started = time.perf_counter()
            with ctx.sessions() as session:
                session.execute(sql("SET TRANSACTION READ ONLY"))
                qctx = resolve_query_context(session, agent, "", count_cap=EXACT_SCAN_MAX_FACTS + 1)
                request = SignalRequest(
                    agent_id=agent,
                    config=config,
                    now=datetime.now(UTC),
                    query_vector=vector,
                    agent_facts=qctx.agent_facts,
                    table_rows=qctx.table_rows,
                    # As the pipeline does: an agent with its own vector index is searched through it.
                    agent_index_min_facts=ctx.settings.retrieval_agent_index_min_facts,
                    agent_index_ef_search=ctx.settings.retrieval_ef_search,
                )
                signals = run_signals(session, request)
            result.semantic_ms.append((time.perf_counter() - started) * 1000.0)
            result.recall_strategies[signals.vector_strategy] += 1
            semantic = sorted(
                (c.semantic for c in signals.candidates if "semantic" in c.sources),
                reverse=True,
            )
            started = time.perf_counter()
            exact = [
                float(row[0])
                for row in conn.execute(
                    _EXACT_TOPK_SQL,
                    {
                        "vec": vector_literal(vector),
                        "agent": agent,
                        # The service filters on the decayed confidence (R6): so does the reference.
                        "min_confidence": config.min_confidence,
                        "confidence_floor": config.confidence_floor,
                        "confidence_decay": config.confidence_decay_per_week,
                        "k": RECALL_K,
                    },
                ).fetchall()
            ]
            result.exact_ms.append((time.perf_counter() - started) * 1000.0)
            value = recall_at_k(semantic, exact, RECALL_K, config.min_similarity)
            if value is not None:
                result.recall.append(value)


# =====================================================================================
# Diagnosis
# =====================================================================================


@contextlib.contextmanager
def captured_statements(engine: Any) -> Iterator[list[tuple[str, Any]]]:
    """Every statement (driver SQL and parameters) ``engine`` runs inside the block."""
    from sqlalchemy import event

    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def explain(engine: Any, statement: str, parameters: Any, setup: Sequence[str] = ()) -> list[str]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of a captured statement, in a read-only transaction (after ``setup``)."""
    with engine.connect() as conn, conn.begin():
        conn.exec_driver_sql("SET TRANSACTION READ ONLY")
        for line in setup:
            conn.exec_driver_sql(line)
        rows = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters).fetchall()
    return [str(row[0]) for row in rows]


@dataclass
class Diagnosis:
    """Where the time goes for the largest agent."""

    agent_id: str = ""
    query: str = ""
    semantic_plan: list[str] = field(default_factory=list)
    full_plan: list[str] = field(default_factory=list)
    full_timings: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def diagnose(ctx: Any, agent: TestedAgent) -> Diagnosis:
    """EXPLAIN ANALYZE of the semantic statement and of a whole signal statement."""
    from memory_core.read import retrieve
    from memory_core.read.entities import resolve_query_context
    from memory_core.read.signals import EXACT_SCAN_MAX_FACTS, SignalRequest, run_signals

    result = Diagnosis(agent_id=agent.agent_id)
    config = ctx.base_config
    top = agent.world.people[0]
    result.query = f"Where does {top.name} live?"
    try:
        vector = ctx.embedder.embed_one(result.query)
        with captured_statements(ctx.engine) as seen, ctx.sessions() as session:
            qctx = resolve_query_context(session, agent.agent_id, "", count_cap=EXACT_SCAN_MAX_FACTS + 1)
            run_signals(
                session,
                SignalRequest(
                    agent_id=agent.agent_id,
                    config=config,
                    now=datetime.now(UTC),
                    query_vector=vector,
                    agent_facts=qctx.agent_facts,
                    table_rows=qctx.table_rows,
                    agent_index_min_facts=ctx.settings.retrieval_agent_index_min_facts,
                    agent_index_ef_search=ctx.settings.retrieval_ef_search,
                ),
            )
        setup = [statement for statement, _ in seen if "hnsw.ef_search" in statement]
        semantic = [(s, p) for s, p in seen if "sem AS (" in s or "sem_ann AS (" in s]
        if semantic:
            result.semantic_plan = explain(ctx.engine, *semantic[0], setup=setup)
        with captured_statements(ctx.engine) as seen:
            answer = retrieve(ctx, agent_id=agent.agent_id, query=result.query, verbose=True)
        result.full_timings = dict((answer.trace or {}).get("timings_ms") or {})
        setup = [statement for statement, _ in seen if "hnsw.ef_search" in statement]
        full = [(s, p) for s, p in seen if "AS in_broad" in s]
        if full:
            result.full_plan = explain(ctx.engine, *full[0], setup=setup)
    except Exception as error:  # diagnosis must not lose the run's figures
        result.errors.append(f"EXPLAIN: {type(error).__name__}: {error}")
    return result


# =====================================================================================
# The run
# =====================================================================================


def _command(argv: Sequence[str]) -> str:
    args = " ".join(argv)
    if os.environ.get("OPS_BENCH_WRAPPER"):
        return f"./ops/bench/retrieve {args}".strip()
    return f"python -m ops.bench retrieve {args}".strip()


def _label(size: int) -> str:
    return f"agent {size // 1000}k" if size >= 1000 and size % 1000 == 0 else f"agent {size}"


def _stages(stage_ms: Mapping[str, list[float]]) -> str:
    order = (
        "plan",
        "embedding",
        "entities",
        "expansion",
        "signals",
        "rank",
        "events",
        "spreading",
        "patterns",
        "rerank",
        "compress",
        "bookkeeping",
    )
    names = [name for name in order if name in stage_ms] + sorted(set(stage_ms) - set(order))
    return ", ".join(f"{name} {percentile(stage_ms[name], 50):.1f}" for name in names)


def _p(values: Sequence[float]) -> str:
    return f"{ms(percentile(values, 50))} / {ms(percentile(values, 95))}"


def _strategy_text(counter: Counter[str]) -> str:
    return ", ".join(f"{name} x {count}" for name, count in counter.most_common()) or "n/a"


def strategy_reason(active: int, seen: Counter[str] | None = None) -> str:
    """Why the semantic signal searches this agent the way it does (by the strategy seen most)."""
    from memory_core.settings import load_settings

    if seen and seen.most_common(1)[0][0].startswith("agent_index"):
        ef_search = load_settings().retrieval_ef_search
        return f"the agent's own partial HNSW index ({active:,} active facts; ef_search {ef_search})"
    return (
        f"exact scan of the agent's {active:,} active facts (no index of its own: fewer than "
        "retrieval_agent_index_min_facts, or its index is not built yet)"
    )


def size_report(result: SizeResult, dataset: Dataset, *, largest: bool) -> PhaseReport:
    """The table rows and notes of one tested agent."""
    report = PhaseReport()
    agent = result.agent
    label = _label(agent.size)
    rows = report.rows
    rows.append(
        Row(
            label,
            "vector strategy (in-process traces / recall pass)",
            f"{_strategy_text(result.strategies)} / {_strategy_text(result.recall_strategies)}: "
            + strategy_reason(result.active_facts, result.strategies),
        )
    )
    rows.append(
        Row(
            label,
            f"in-process retrieve() p50 / p95 ({len(result.inprocess)} questions, verbose)",
            _p(result.inprocess),
        )
    )
    p50, p95 = percentile(result.http, 50), percentile(result.http, 95)
    latency_ok = p50 <= TARGET_P50_S and p95 <= TARGET_P95_S and not result.http_errors
    target = f"p50 <= {TARGET_P50_S * 1000:.0f} ms, p95 <= {TARGET_P95_S * 1000:.0f} ms"
    if largest:
        report.targets[f"{label} latency"] = latency_ok
        target += f": {verdict(latency_ok)}"
    else:
        target = f"({target} at the largest size)"
    rows.append(
        Row(
            label,
            f"HTTP retrieve p50 / p95 (1 client, {len(result.http)} questions)",
            f"{ms(p50)} / {ms(p95)}" + (f"; {len(result.http_errors)} errors" if result.http_errors else ""),
            target,
        )
    )
    rows.append(Row(label, "stage p50 in ms (verbose trace)", _stages(result.stage_ms)))
    rows.append(
        Row(
            label,
            f"throughput, {CONCURRENT_CLIENTS} concurrent httpx clients ({result.walls.get('load window', 0):.0f} s)",
            f"{result.load_rate:,.1f} retrieves/s; p50 / p95 under load {_p(result.load_latencies)}; "
            f"{len(result.load_errors)} errors; client CPU {result.load_client_cpu_ms:.1f} ms/request",
        )
    )
    rows.append(
        Row(
            label,
            f"control: minimal HTTP client, {CONCURRENT_CLIENTS} connections "
            f"({len(result.control_latencies)} requests)",
            f"{result.control_rate:,.1f} retrieves/s; p50 / p95 {_p(result.control_latencies)}; "
            f"{len(result.control_errors)} errors",
        )
    )
    rows.append(
        Row(
            label,
            f"{stack_cpu_label('retrieve')}: minimal client; httpx clients",
            f"{result.control_stack_cpu or 'n/a'}; {result.load_stack_cpu or 'n/a'}",
        )
    )
    rows.append(
        Row(
            label,
            "CPU per retrieve by process (ms), httpx load / control",
            f"{result.load_cpu or 'n/a'} / {result.control_cpu or 'n/a'}",
        )
    )
    loaded = result.threads.get("with bookkeeping")
    if loaded is not None:
        rows.append(
            Row(
                label,
                f"in-process, {CONCURRENT_CLIENTS} threads: retrieves/s; p50 / p95; stage p50 under load (ms)",
                f"{loaded.rate:,.1f}/s; {_p(loaded.latencies)}; {_stages(loaded.stage_ms)}; bookkeeping not "
                f"recorded (lock timeout) in {loaded.not_recorded} of {len(loaded.latencies)}",
            )
        )
    without = result.threads.get("without bookkeeping")
    if without is not None:
        rows.append(
            Row(
                label,
                "what-if: the same without the bookkeeping UPDATE (a no-op in the benchmark process only)",
                f"{without.rate:,.1f}/s; {_p(without.latencies)}; signals p50 "
                f"{percentile(without.stage_ms.get('signals', []), 50):.1f} ms",
            )
        )
    recall = sum(result.recall) / len(result.recall) if result.recall else math.nan
    recall_ok = recall >= TARGET_RECALL
    report.targets[f"{label} recall@10"] = recall_ok
    rows.append(
        Row(
            label,
            f"recall@{RECALL_K} of the semantic signal vs exact search ({len(result.recall)} questions)",
            f"{recall:.3f} (min {min(result.recall, default=math.nan):.2f})",
            f">= {TARGET_RECALL}: {verdict(recall_ok)}",
        )
    )
    rows.append(
        Row(
            label,
            "semantic signal alone (run_signals) p50 / p95; exact top-10 scan p50 / p95",
            f"{_p([v / 1000 for v in result.semantic_ms])}; {_p([v / 1000 for v in result.exact_ms])}",
        )
    )
    rows.append(
        Row(
            label,
            "candidates / facts returned (median)",
            f"{percentile(result.candidates, 50):.0f} / {percentile(result.facts_returned, 50):.0f}",
        )
    )
    rows.append(
        Row(
            label,
            "wall time / peak memory",
            f"{secs(result.walls.get('total', math.nan))} / {mib(result.peaks.get('total', 0))} "
            f"(under load {mib(result.peaks.get('load', 0))})",
        )
    )
    report.notes.append(
        f"{label}: 1-minute load average when the phase started: {result.load_average:.2f}; speed probe just "
        f"before the {CONCURRENT_CLIENTS}-client load: {result.load_speed_probe_ms:.1f} ms."
    )
    report.notes.extend(result.window_notes)
    for what, errors in (
        ("HTTP", result.http_errors),
        ("load", result.load_errors),
        ("control", result.control_errors),
    ):
        if errors:
            report.notes.append(f"{label}: {len(errors)} {what} errors, e.g. {errors[0]}")
    return report


_INDEX_METHODS = {"btree": "b-tree", "gin": "GIN", "gist": "GiST", "hnsw": "HNSW"}


def dataset_report(dataset: Dataset, scale: Scale, workers: int) -> PhaseReport:
    """Rows about the table and how it was built."""
    report = PhaseReport()
    rows = report.rows
    tested = ", ".join(f"{agent.size:,}" for agent in dataset.tested)
    others = sorted(dataset.other_sizes)
    rows.append(
        Row(
            "dataset",
            "facts / agents",
            f"{dataset.facts:,} facts ({dataset.active_facts:,} active) over {dataset.agents:,} agents: tested "
            f"{tested}; the other {len(others)} share {sum(others):,} (median {percentile(others, 50):,.0f}, "
            f"max {max(others, default=0):,})",
            f">= {scale.table_facts:,} over {scale.agents:,}",
        )
    )
    rows.append(
        Row(
            "dataset",
            "tested agents' graph",
            f"{dataset.events:,} events (messages), {dataset.entities:,} entities, {dataset.aliases:,} aliases, "
            f"{dataset.links:,} fact-entity links, {dataset.relationships:,} relationships",
        )
    )
    copy_s = dataset.timings.get("facts COPY", math.nan)
    rows.append(
        Row(
            "dataset",
            f"generate + embed ({workers} worker processes) + binary COPY of the facts",
            f"{secs(copy_s)} ({dataset.facts / copy_s:,.0f} facts/s); events {secs(dataset.timings['events COPY'])}; "
            f"graph tables {secs(dataset.timings['graph tables COPY'])}",
        )
    )
    methods = Counter(name.rsplit(" ", 1)[-1].strip("()") for name, _ in dataset.index_timings)
    kinds = ", ".join(f"{count} {_INDEX_METHODS.get(method, method)}" for method, count in sorted(methods.items()))
    rows.append(
        Row(
            "dataset",
            f"index rebuild (maintenance_work_mem {BUILD_MAINTENANCE_WORK_MEM}, "
            f"{BUILD_PARALLEL_WORKERS} parallel maintenance workers)",
            f"{len(dataset.index_timings)} indexes of {', '.join(BULK_TABLES)}"
            + (f" ({kinds})" if kinds else "")
            + f" in {secs(dataset.timings.get('index rebuild', math.nan))}",
        )
    )
    rows.append(Row("dataset", "VACUUM ANALYZE", secs(dataset.timings["vacuum analyze"])))
    rows.append(
        Row(
            "dataset",
            "sizes on disk",
            f"memory_facts {mib(dataset.sizes.get('memory_facts', 0))} with indexes; memory_events "
            f"{mib(dataset.sizes.get('memory_events', 0))}; database {mib(dataset.sizes.get('database', 0))} "
            "(before the per-agent indexes)",
        )
    )
    rows.append(
        Row(
            "dataset",
            "wall time / peak memory (load; index rebuild)",
            f"{secs(dataset.timings['total'])} / {mib(dataset.peaks.get('load', 0))}; "
            f"{mib(dataset.peaks.get('index rebuild', 0))}",
        )
    )
    load_s = dataset.timings.get("events COPY", 0.0) + copy_s
    report.notes.append(
        f"dataset: the {workers} embedding worker processes (the benchmark's own, not the stack) used "
        f"{dataset.worker_cpu_s:,.0f} CPU-s over the {load_s:,.0f} s of COPY "
        f"({dataset.worker_cpu_s / max(load_s, 1e-9) * 100:.0f}% of one core); they are not part of the stack's "
        "memory figures."
    )
    detail = ", ".join(f"{name} {secs(seconds)}" for name, seconds in dataset.index_timings)
    report.notes.append(f"dataset: index builds in order: {detail}.")
    report.notes.append(
        "dataset: server settings " + ", ".join(f"{name}={value}" for name, value in dataset.settings.items()) + "."
    )
    report.notes.append(
        "dataset: facts are written in arrival order (every agent's rows interleaved over two years of valid_from, "
        "as concurrent agents write them), so an agent's rows are scattered over the heap as in production; "
        f"created_at spans the last {STORED_DAYS} days in the same order (the decay behind min_confidence counts "
        "from it); ~1 in 20 facts is a superseded version (valid_to set) and 3% have a confidence below "
        "min_confidence. Only the tested agents "
        "have events, entities, aliases, links and relationships; the other agents' facts have no source event."
    )
    return report


def diagnosis_notes(diagnosis: Diagnosis) -> list[str]:
    """Notes (and fenced plans) explaining where the largest agent's time goes."""
    notes: list[str] = []
    if diagnosis.full_timings:
        stages = ", ".join(f"{name} {value:.1f}" for name, value in diagnosis.full_timings.items())
        notes.append(f"diagnosis ({diagnosis.agent_id}, {diagnosis.query!r}): stage timings in ms: {stages}.")
    notes.extend(f"diagnosis failed: {error}" for error in diagnosis.errors)
    return notes


_VECTOR_LITERAL = re.compile(r"'\[[-+0-9.e,]+\]'::vector")


def abbreviate(lines: Sequence[str]) -> list[str]:
    """Plan lines with every vector literal shortened (a 384-float literal says nothing)."""
    return [_VECTOR_LITERAL.sub(f"'[{DIMENSIONS} floats]'::vector", line) for line in lines]


def update_statistics(database_url: str) -> Row:
    """How the retrieval bookkeeping's writes of memory_fact_usage went: HOT updates (no index entry) / all."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        stats = conn.execute(
            "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'memory_fact_usage'"
        ).fetchone()
    inserted, updated, hot = (int(stats[0]), int(stats[1]), int(stats[2])) if stats else (0, 0, 0)
    share = hot / updated if updated else math.nan
    return Row(
        "whole run",
        "memory_fact_usage rows updated by retrieval bookkeeping: HOT / all",
        f"{hot:,} / {updated:,} ({share:.0%}); every other update inserted a primary-key entry; "
        f"{inserted:,} first counts inserted a row (one primary-key entry each)",
    )


def _plan_block(title: str, lines: Sequence[str]) -> str:
    if not lines:
        return ""
    body = "\n".join(abbreviate(lines))
    return f"<details><summary>{title}</summary>\n\n```\n{body}\n```\n\n</details>\n"


def _section(
    machine: MachineInfo,
    *,
    command: str,
    quick: bool,
    load: str,
    stack_line: str,
    rows: Sequence[Row],
    notes: Sequence[str],
    plans: Sequence[tuple[str, Sequence[str]]],
) -> str:
    title = f"## Retrieve — {machine.date:%Y-%m-%d %H:%M} UTC" + (" — quick (a tenth of the size)" if quick else "")
    table = markdown_table(
        ("phase", "measure", "result", "target"), [(r.phase, r.measure, r.result, r.target) for r in rows]
    )
    bullets = "\n".join(f"- {note}" for note in notes)
    blocks = "".join(_plan_block(name, lines) for name, lines in plans)
    return (
        f"{title}\n\n- command: `{command}`\n- machine: {machine.describe()}; {load}\n- stack: {stack_line}\n\n"
        f"{table}\n\n{bullets}\n" + (f"\n{blocks}" if blocks else "")
    )


def _stack_line() -> str:
    from memory_core.settings import load_settings

    settings = load_settings()
    return (
        f"API (uvicorn, {settings.api_processes} process{'es' if settings.api_processes != 1 else ''} on one port), "
        "worker pools, Beat, Flower (idle); embedded PostgreSQL 18 + pgvector and "
        f"Redis; DB pool {settings.database_pool_size} (+{settings.database_pool_size} overflow) per process; "
        f"LLM {settings.llm.value} (no reranker), embeddings {settings.embedder.value} ({settings.dimensions}); "
        f"ARANDU_LOG_LEVEL={settings.log_level.value}"
    )


def measure_size(stack: BenchStack, sampler: MemorySampler, ctx: Any, agent: TestedAgent, scale: Scale) -> SizeResult:
    """Every measurement of one tested agent."""
    label = _label(agent.size)
    result = SizeResult(agent=agent)
    queries = agent.queries
    result.load_average = os.getloadavg()[0]
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        count = conn.execute(
            "SELECT count(*) FROM memory_facts WHERE agent_id = %s AND valid_to IS NULL", (agent.agent_id,)
        ).fetchone()
    result.active_facts = int(count[0]) if count else 0
    window = Window(stack).open()
    started = window.started
    print(f"{label}: {len(queries)} questions; warm-up, in-process retrieve() with traces...", flush=True)
    measure_inprocess(ctx, result, queries[: scale.warmup_queries], record=False)
    measure_inprocess(ctx, result, queries, record=True)
    print(f"{label}: HTTP, one client...", flush=True)
    warm = SizeResult(agent=agent)
    measure_http_sequential(stack, warm, queries[: scale.warmup_queries])
    measure_http_sequential(stack, result, queries)
    print(f"{label}: HTTP, {CONCURRENT_CLIENTS} concurrent clients for {scale.throughput_s:.0f} s...", flush=True)
    result.load_speed_probe_ms = speed_probe_ms()
    moment = time.monotonic()
    measure_http_concurrent(stack, result, scale)
    result.walls["load"] = time.monotonic() - moment
    result.peaks["load"] = sampler.peak(moment, time.monotonic())
    print(f"{label}: in-process, {CONCURRENT_CLIENTS} threads, with and without bookkeeping...", flush=True)
    for name, keep in (("with bookkeeping", True), ("without bookkeeping", False)):
        result.threads[name] = measure_inprocess_concurrent(
            ctx, agent.agent_id, queries, threads=CONCURRENT_CLIENTS, seconds=scale.thread_load_s, bookkeeping=keep
        )
    print(f"{label}: recall@{RECALL_K} of the semantic signal against exact search...", flush=True)
    measure_recall(ctx, stack.database_url, result, queries)
    finished = time.monotonic()
    result.walls["total"] = finished - started
    result.peaks["total"] = sampler.peak(started, finished)
    result.window_notes = window.notes(label)
    print(
        f"{label}: HTTP p50 {ms(percentile(result.http, 50))}, p95 {ms(percentile(result.http, 95))}; "
        f"{result.load_rate:,.1f} retrieves/s; recall@{RECALL_K} "
        f"{sum(result.recall) / max(len(result.recall), 1):.3f}; strategy {_strategy_text(result.strategies)}",
        flush=True,
    )
    return result


def reuse_dataset(database_url: str, scale: Scale) -> Dataset:
    """The dataset a kept home holds: the tested agents regenerated (same seed), sizes read back."""
    now = datetime.now(UTC)
    plan = DatasetPlan(scale, now)
    # Generated again as the load generated them, so that the worlds hold the same facts (the
    # questions are drawn from what each person has done: without it a reused home was asked
    # none of the questions about the people's jobs, studies and moves).
    plan.prepare_tested()
    dataset = Dataset(tested=plan.tested, agents=len(plan.agent_ids), other_sizes=plan.other_sizes)
    with psycopg.connect(database_url, autocommit=True) as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM memory_facts), (SELECT count(*) FROM memory_facts WHERE valid_to IS NULL), "
            "(SELECT count(DISTINCT agent_id) FROM memory_facts)"
        ).fetchone()
    if counts is None or int(counts[0]) == 0:
        raise RuntimeError("the reused home holds no facts: run once with --keep-home first")
    dataset.facts, dataset.active_facts, dataset.agents = int(counts[0]), int(counts[1]), int(counts[2])
    return dataset


def build_agent_indexes(database_url: str, min_facts: int) -> list[tuple[str, int, float, str]]:
    """What the service's maintenance does for large agents: a partial vector index each (agent, facts, s, what)."""
    from sqlalchemy import create_engine

    from memory_core.read.agent_index import agents_needing_index, build_agent_index

    engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    built: list[tuple[str, int, float, str]] = []
    try:
        with engine.connect() as connection:
            from sqlalchemy.orm import Session

            with Session(bind=connection) as session:
                needed = agents_needing_index(session, min_facts)
        for agent_id, facts in needed:
            print(f"  vector and keyword indexes of {agent_id} ({facts:,} facts)...", flush=True)
            outcome = build_agent_index(engine, agent_id)
            built.append((agent_id, facts, outcome.seconds, outcome.reason))
    finally:
        engine.dispose()
    return built


def agent_index_sizes(database_url: str) -> dict[str, tuple[int, int]]:
    """How many per-agent partial indexes exist and their bytes on disk: vector (HNSW) and keyword (GIN)."""
    from memory_core.read.agent_index import AGENT_INDEX_PREFIX, AGENT_TEXT_INDEX_PREFIX

    sizes: dict[str, tuple[int, int]] = {}
    with psycopg.connect(database_url, autocommit=True) as conn:
        for kind, prefix in (("HNSW", AGENT_INDEX_PREFIX), ("GIN", AGENT_TEXT_INDEX_PREFIX)):
            row = conn.execute(
                "SELECT count(*), COALESCE(sum(pg_relation_size(c.oid)), 0) FROM pg_class c "
                "WHERE c.relkind = 'i' AND starts_with(c.relname, %s)",
                (prefix,),
            ).fetchone()
            sizes[kind] = (int(row[0]), int(row[1])) if row else (0, 0)
    return sizes


def agent_index_report(
    built: Sequence[tuple[str, int, float, str]], min_facts: int, sizes: Mapping[str, tuple[int, int]]
) -> PhaseReport:
    """Rows about the per-agent vector and keyword indexes built after the load."""
    report = PhaseReport()
    total = sum(seconds for _, _, seconds, _ in built)
    largest = max(built, key=lambda item: item[1], default=None)
    detail = f"{len(built)} agents with >= {min_facts:,} facts; {secs(total)} in all"
    if largest is not None:
        detail += f" (largest: {largest[0]}, {largest[1]:,} facts, {secs(largest[2])})"
    if sizes:
        detail += "; on disk " + ", ".join(f"{count} {kind} {mib(size)}" for kind, (count, size) in sizes.items())
    report.rows.append(Row("dataset", "per-agent partial HNSW + GIN indexes (maintenance, CONCURRENTLY)", detail))
    if built:
        report.notes.append(
            "dataset: per-agent vector and keyword indexes: "
            + ", ".join(
                f"{agent} {facts:,} facts {secs(seconds)} ({reason})" for agent, facts, seconds, reason in built
            )
            + "."
        )
    return report


def run_retrieve_benchmark(
    *,
    quick: bool,
    keep_home: bool,
    record: bool,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    reuse_home: Path | None = None,
) -> int:
    """Build the dataset (or reuse a kept one), measure every tested agent, print the table, append it to RESULTS.md."""
    from memory_core.read import build_read_context
    from memory_core.settings import load_settings

    scale = Scale.quick() if quick else Scale()
    machine = machine_info()
    command = _command(argv)
    load = "load average at start {:.2f} / {:.2f} / {:.2f} (1 / 5 / 15 min)".format(*os.getloadavg())
    workers = max(1, machine.cpus)
    rows: list[Row] = []
    notes: list[str] = []
    targets: dict[str, bool] = {}
    plans: list[tuple[str, Sequence[str]]] = []
    stack_line = ""
    overall = time.monotonic()
    stack = BenchStack(
        env={"ARANDU_EMBEDDING_PROVIDER": "hashing", **dict(env or {})},
        keep_home=keep_home,
        label="retrieve",
        home=reuse_home,
    )
    sampler = MemorySampler(stack)
    ctx: Any = None
    code = 0
    try:
        print(f"retrieve benchmark{' (quick)' if quick else ''} on {machine.describe()}; {load}", flush=True)
        ready_s = stack.start()
        print(f"stack ready in {ready_s:.1f} s under {stack.home}", flush=True)
        stack_line = _stack_line()
        sampler.start()
        idle = sampler.settled(2.0)
        rows.append(Row("start-up", "ready / idle stack memory (PSS)", f"{secs(ready_s)} / {mib(idle)}"))
        print(
            f"dataset: {scale.table_facts:,} facts over {scale.agents:,} agents (tested: "
            f"{', '.join(f'{size:,}' for size in scale.tested)}); {workers} embedding workers...",
            flush=True,
        )
        if reuse_home is None:
            dataset = build_dataset(stack.database_url, scale, sampler, workers)
            _collect(dataset_report(dataset, scale, workers), rows, notes, targets)
            print(f"dataset ready in {dataset.timings['total']:.0f} s", flush=True)
        else:
            dataset = reuse_dataset(stack.database_url, scale)
            rows.append(
                Row(
                    "dataset",
                    "facts / agents (reused home: not loaded by this run)",
                    f"{dataset.facts:,} facts ({dataset.active_facts:,} active) over {dataset.agents:,} agents",
                )
            )
            print(f"dataset reused from {reuse_home}: {dataset.facts:,} facts", flush=True)
        settings = load_settings()
        min_facts = settings.retrieval_agent_index_min_facts
        built = build_agent_indexes(stack.database_url, min_facts)
        _collect(agent_index_report(built, min_facts, agent_index_sizes(stack.database_url)), rows, notes, targets)

        ctx = build_read_context(settings)
        statements = StatementStats(stack.database_url)
        statements.reset()  # the measurements only, not the load
        results: list[SizeResult] = []
        for agent in dataset.tested:
            agent.queries = make_queries(agent.world, scale.queries, SEED + agent.size)
            results.append(measure_size(stack, sampler, ctx, agent, scale))
        largest = max(dataset.tested, key=lambda agent: agent.size)
        for result in results:
            _collect(size_report(result, dataset, largest=result.agent is largest), rows, notes, targets)

        print(f"diagnosis of {largest.agent_id}: EXPLAIN ANALYZE...", flush=True)
        diagnosis = diagnose(ctx, largest)
        notes.extend(diagnosis_notes(diagnosis))
        plans.append((f"EXPLAIN ANALYZE of the semantic signal statement, {largest.agent_id}", diagnosis.semantic_plan))
        plans.append(
            (
                f"EXPLAIN ANALYZE of the whole signal statement, {largest.agent_id}: {diagnosis.query}",
                diagnosis.full_plan,
            )
        )

        plans.append(("PostgreSQL's top statements by total execution time during the measurements", statements.top()))
        rows.append(update_statistics(stack.database_url))
        peak = sampler.peak()
        rows.append(Row("whole run", "peak stack memory (PSS)", mib(peak)))
        rows.append(Row("whole run", "wall time", secs(time.monotonic() - overall)))
        notes.append(
            "Latency: `in-process` is `retrieve()` called in the benchmark process (its own pool and embedder, "
            "verbose trace on); `HTTP` is `POST /v1/agents/{agent}/retrieve` from one keep-alive client, the "
            "figure the target judges. Throughput: 16 keep-alive httpx clients for "
            f"{scale.throughput_s:.0f} s after {scale.throughput_warmup_s:.0f} s of warm-up, cycling the same "
            "questions; the control repeats it with the ingest benchmark's minimal HTTP client (a tenth of "
            "httpx's CPU), so the load generator's share on 2 cores shows. Recall: the semantic signal's top 10 "
            "as `run_signals` returns it (the agent's own index, or the strategy by count; guard) against an exact "
            "scan of the agent's "
            "active facts above min_confidence; ties count as hits (template facts repeat)."
        )
        notes.append(
            "CPU shares: per process of the stack; PostgreSQL backends and parallel workers that ended during "
            "a phase (the API pool's overflow connections under 16 clients, the recall pass's exact scans) count "
            "as postgres, through the postmaster's children's CPU time; the load average at the start of each "
            "phase shows how quiet the machine was."
        )
        missed = [name for name, held in targets.items() if not held]
        notes.append("Targets missed: " + ", ".join(missed) + "." if missed else "Every target was met.")
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
            if ctx is not None:
                ctx.close()
            stack.stop()
    table_rows = [(r.phase, r.measure, r.result, r.target) for r in rows]
    if code != 0:
        if rows:
            print(
                "\npartial figures (not recorded):\n" + text_table(("phase", "measure", "result", "target"), table_rows)
            )
        return code
    print("\n" + text_table(("phase", "measure", "result", "target"), table_rows))
    print("\n" + "\n".join(f"- {note}" for note in notes))
    for name, lines in plans:
        if lines:
            print(f"\n{name}:\n" + "\n".join(abbreviate(lines)))
    if record:
        append_results(
            _section(
                machine,
                command=command,
                quick=quick,
                load=load,
                stack_line=stack_line,
                rows=rows,
                notes=notes,
                plans=plans,
            )
        )
        print(f"\nappended to {Path('ops/bench/RESULTS.md')}")
    return 0


def _collect(report: PhaseReport, rows: list[Row], notes: list[str], targets: dict[str, bool]) -> None:
    rows.extend(report.rows)
    notes.extend(report.notes)
    targets.update(report.targets)
