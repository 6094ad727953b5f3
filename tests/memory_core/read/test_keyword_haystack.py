"""The text a keyword is looked for in: PostgreSQL builds the same string as Python."""

from __future__ import annotations

from sqlalchemy import Engine

from memory_core.db.statements import sql
from memory_core.read.planner import WORD_START_MARKS, keyword_haystack, keyword_haystack_sql, match_forms

TEXTS = [
    "Rafael mora em São Paulo",
    "(mora) [no] {Rio} \"Ana\" 'rafael' \u201cCarla\u201d \u2018Beto\u2019 pré-natal e/ou \u00bfqué? \u00a1olé!",
    "ÁGUA, Ítalo, ÇEDILHA e ÑANDU",
    "it's Tara O'Neill's dog--Rex",
    "",
    "   spaces\tand\nnewlines   ",
    WORD_START_MARKS * 3,
]


def test_the_sql_haystack_is_the_python_one_for_every_mark_case_and_accent(engine: Engine) -> None:
    statement = sql(f"SELECT {keyword_haystack_sql('CAST(:text AS text)')}")
    with engine.connect() as connection:
        for text in TEXTS:
            assert connection.execute(statement, {"text": text}).scalar_one() == keyword_haystack(text), text


def test_a_keyword_is_found_at_a_word_start_after_any_mark(engine: Engine) -> None:
    statement = sql(f"SELECT strpos({keyword_haystack_sql('CAST(:text AS text)')}, :word) > 0")
    cases = [
        ("ela (mora) aqui", "mora", True),
        ("a namorada dele", "mora", False),
        ("consulta pré-natal", "natal", True),
        ("\u201cRafael\u201d disse", "rafael", True),
        ("\u00bfDónde está?", "dónde", True),
        ("O'Neill", "neill", True),
    ]
    with engine.connect() as connection:
        for text, word, found in cases:
            plain, _ = match_forms(word)
            assert connection.execute(statement, {"text": text, "word": plain}).scalar_one() is found, (text, word)
