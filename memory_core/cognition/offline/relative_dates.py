"""Relative dates made absolute: "yesterday" said on 8 May 2023 is 7 May 2023 (W7, offline).

A fact must stand alone: read a year later, "Caroline went to a support group yesterday" no
longer says when. The offline extraction therefore keeps the sentence's own words and adds,
right after each relative expression, the date it means, resolved against the message's
``occurred_at`` in the configured ``timezone`` (a message said at 23:30 in São Paulo is said
on that local day, whatever the UTC date):

* "yesterday" -> "yesterday (7 May 2023)", "ontem" -> "ontem (7 de maio de 2023)";
* "last week" -> "last week (the week of 1 May 2023)", "semana passada" -> "semana passada
  (semana de 1 de maio de 2023)": a week is named by its Monday;
* "last month" / "mês passado" -> "(April 2023)" / "(abril de 2023)"; "last year" -> "(2022)";
* "in two days" / "daqui a dois dias" / "two days ago" / "há dois dias" -> the day;
  "three weeks ago" -> the week, "two months ago" -> the month, "a year ago" -> the year;
* "last Friday" / "sexta passada" -> the latest Friday before the message's day; "next Friday"
  / "próxima sexta" -> the first one after it; "tomorrow", "the day after tomorrow",
  "anteontem", "this morning", "tonight", "next week", "semana que vem"...

English and Portuguese expressions are both recognised in any sentence (their words do not
overlap); the added date is written in the fact's language. Bare weekdays ("on Friday") are
left alone: without the tense nobody knows which Friday. Pure and cheap: a few precompiled
regexes over one sentence.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from memory_core.cognition.offline.text import Language

__all__ = ["local_date", "resolve_relative_dates"]

_MONTHS_EN = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
              "November", "December")  # fmt: skip
_MONTHS_PT = ("janeiro", "fevereiro", "março", "abril", "maio", "junho", "julho", "agosto", "setembro", "outubro",
              "novembro", "dezembro")  # fmt: skip

_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "couple of": 2,
    "um": 1, "uma": 1, "dois": 2, "duas": 2, "três": 3, "tres": 3, "quatro": 4, "cinco": 5, "seis": 6,
    "sete": 7, "oito": 8, "nove": 9, "dez": 10, "onze": 11, "doze": 12,
}  # fmt: skip
_NUMBER = (
    r"(?P<n>\d{1,3}|a\s+couple\s+of|couple\s+of|an?|one|two|three|four|five|six|seven|eight|nine|ten|"
    r"eleven|twelve|uma?|dois|duas|tr[eê]s|quatro|cinco|seis|sete|oito|nove|dez|onze|doze)"
)
_UNIT_EN = r"(?P<unit>days?|weeks?|months?|years?)"
_UNIT_PT = r"(?P<unit>dias?|semanas?|m[eê]s|meses|anos?)"

_WEEKDAYS_EN = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# Portuguese weekday stems (folded), Monday first; "-feira" is optional.
_WEEKDAYS_PT = ("segunda", "terca", "quarta", "quinta", "sexta", "sabado", "domingo")
_WEEKDAY_EN = r"(?P<weekday>" + "|".join(_WEEKDAYS_EN) + r")"
_WEEKDAY_PT = r"(?P<weekday>segunda|ter[cç]a|quarta|quinta|sexta|s[aá]bado|domingo)(?:-feira)?"

# What an expression means: a day, the week (Monday) or weekend (Saturday) holding a day, a month, a year.
_DAY, _WEEK, _WEEKEND, _MONTH, _YEAR = "day", "week", "weekend", "month", "year"


@dataclass(frozen=True)
class _Span:
    """A resolved period: its kind and a day inside it."""

    kind: str
    day: date


def _number(raw: str) -> int:
    word = " ".join(raw.casefold().split())
    return int(word) if word.isdigit() else _NUMBERS.get(word, _NUMBERS.get(word.replace("ê", "e"), 1))


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _shift(day: date, unit: str, count: int) -> _Span:
    """``count`` units after ``day`` (before it when negative), as the period the unit names."""
    unit = unit.casefold()
    if unit.startswith(("day", "dia")):
        return _Span(_DAY, day + timedelta(days=count))
    if unit.startswith(("week", "semana")):
        return _Span(_WEEK, day + timedelta(weeks=count))
    if unit.startswith(("month", "mes", "mês", "meses")):
        return _Span(_MONTH, _add_months(day, count))
    return _Span(_YEAR, date(day.year + count, 1, 1))


def _weekday_index(raw: str) -> int:
    word = raw.casefold().replace("ç", "c").replace("á", "a").split("-")[0]
    if word in _WEEKDAYS_EN:
        return _WEEKDAYS_EN.index(word)
    return _WEEKDAYS_PT.index(word)


def _last_weekday(day: date, weekday: int) -> date:
    """The latest ``weekday`` strictly before ``day``."""
    back = (day.weekday() - weekday) % 7 or 7
    return day - timedelta(days=back)


def _next_weekday(day: date, weekday: int) -> date:
    """The first ``weekday`` strictly after ``day``."""
    ahead = (weekday - day.weekday()) % 7 or 7
    return day + timedelta(days=ahead)


_Resolver = Callable[[re.Match[str], date], _Span]


def _fixed(kind: str, days: int = 0, months: int = 0, years: int = 0) -> _Resolver:
    def resolve(_: re.Match[str], day: date) -> _Span:
        if years:
            return _Span(kind, date(day.year + years, 1, 1))
        if months:
            return _Span(kind, _add_months(day, months))
        return _Span(kind, day + timedelta(days=days))

    return resolve


def _ago(match: re.Match[str], day: date) -> _Span:
    return _shift(day, match.group("unit"), -_number(match.group("n")))


def _ahead(match: re.Match[str], day: date) -> _Span:
    return _shift(day, match.group("unit"), _number(match.group("n")))


def _last(match: re.Match[str], day: date) -> _Span:
    return _Span(_DAY, _last_weekday(day, _weekday_index(match.group("weekday"))))


def _next(match: re.Match[str], day: date) -> _Span:
    return _Span(_DAY, _next_weekday(day, _weekday_index(match.group("weekday"))))


def _pt_ago(match: re.Match[str], day: date) -> _Span:
    """ "há dois dias" or "dois dias atrás": the number and unit sit in one of two group pairs."""
    if match.group("n") is not None:
        return _shift(day, match.group("unit"), -_number(match.group("n")))
    return _shift(day, match.group("unit2"), -_number(match.group("n2")))


def _rule(pattern: str, resolver: _Resolver) -> tuple[re.Pattern[str], _Resolver]:
    return re.compile(r"(?<![\w'’-])(?:" + pattern + r")(?![\w'’-])", re.IGNORECASE), resolver


# Longer expressions first: "the day before yesterday" before "yesterday", "last weekend" before
# "last week". A match is never matched again by a later rule (the spans may not overlap).
_RULES: tuple[tuple[re.Pattern[str], _Resolver], ...] = (
    _rule(r"the\s+day\s+before\s+yesterday", _fixed(_DAY, days=-2)),
    _rule(r"the\s+day\s+after\s+tomorrow", _fixed(_DAY, days=2)),
    _rule(r"depois\s+de\s+amanh[ãa]", _fixed(_DAY, days=2)),
    _rule(r"anteontem", _fixed(_DAY, days=-2)),
    _rule(r"yesterday|last\s+night|ontem", _fixed(_DAY, days=-1)),
    _rule(r"today|tonight|this\s+(?:morning|afternoon|evening)|hoje", _fixed(_DAY)),
    _rule(r"tomorrow|amanh[ãa]", _fixed(_DAY, days=1)),
    _rule(r"last\s+weekend|(?:o\s+)?fim\s+de\s+semana\s+passado", _fixed(_WEEKEND, days=-7)),
    _rule(r"next\s+weekend|(?:o\s+)?pr[oó]ximo\s+fim\s+de\s+semana|fim\s+de\s+semana\s+que\s+vem",
          _fixed(_WEEKEND, days=7)),
    _rule(r"this\s+weekend|neste\s+fim\s+de\s+semana|este\s+fim\s+de\s+semana", _fixed(_WEEKEND)),
    _rule(r"last\s+week|(?:na\s+)?semana\s+passada", _fixed(_WEEK, days=-7)),
    _rule(r"next\s+week|(?:na\s+)?semana\s+que\s+vem|(?:na\s+)?pr[oó]xima\s+semana", _fixed(_WEEK, days=7)),
    _rule(r"last\s+month|(?:no\s+)?m[eê]s\s+passado", _fixed(_MONTH, months=-1)),
    _rule(r"next\s+month|(?:no\s+)?m[eê]s\s+que\s+vem|(?:no\s+)?pr[oó]ximo\s+m[eê]s", _fixed(_MONTH, months=1)),
    _rule(r"last\s+year|(?:no\s+)?ano\s+passado", _fixed(_YEAR, years=-1)),
    _rule(r"next\s+year|(?:no\s+)?ano\s+que\s+vem|(?:no\s+)?pr[oó]ximo\s+ano", _fixed(_YEAR, years=1)),
    _rule(_NUMBER + r"\s+" + _UNIT_EN + r"\s+ago", _ago),
    _rule(r"in\s+" + _NUMBER + r"\s+" + _UNIT_EN, _ahead),
    _rule(r"h[aá]\s+" + _NUMBER + r"\s+" + _UNIT_PT + r"(?:\s+atr[aá]s)?|" + _NUMBER.replace("?P<n>", "?P<n2>")
          + r"\s+" + _UNIT_PT.replace("?P<unit>", "?P<unit2>") + r"\s+atr[aá]s", _pt_ago),
    _rule(r"(?:daqui\s+a|em)\s+" + _NUMBER + r"\s+" + _UNIT_PT, _ahead),
    _rule(r"last\s+" + _WEEKDAY_EN, _last),
    _rule(r"next\s+" + _WEEKDAY_EN, _next),
    _rule(r"(?:n[oa]\s+)?" + _WEEKDAY_PT + r"\s+passad[oa]", _last),
    _rule(r"(?:n[oa]\s+)?pr[oó]xim[oa]\s+" + _WEEKDAY_PT, _next),
    _rule(r"(?:n[oa]\s+)?" + _WEEKDAY_PT + r"\s+que\s+vem", _next),
)  # fmt: skip


def _render(span: _Span, language: Language) -> str:
    day = span.day
    if span.kind == _YEAR:
        return str(day.year)
    if span.kind == _MONTH:
        if language == "pt":
            return f"{_MONTHS_PT[day.month - 1]} de {day.year}"
        return f"{_MONTHS_EN[day.month - 1]} {day.year}"
    if span.kind == _WEEK:
        monday = day - timedelta(days=day.weekday())
        return ("semana de " if language == "pt" else "the week of ") + _render(_Span(_DAY, monday), language)
    if span.kind == _WEEKEND:
        saturday = day + timedelta(days=5 - day.weekday())
        prefix = "fim de semana de " if language == "pt" else "the weekend of "
        return prefix + _render(_Span(_DAY, saturday), language)
    if language == "pt":
        return f"{day.day} de {_MONTHS_PT[day.month - 1]} de {day.year}"
    return f"{day.day} {_MONTHS_EN[day.month - 1]} {day.year}"


def local_date(moment: datetime, timezone: str) -> date:
    """The calendar day of ``moment`` in ``timezone`` (UTC when the zone is unknown; naive = UTC)."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo("UTC"))
    return moment.astimezone(zone).date()


def resolve_relative_dates(text: str, day: date, language: Language) -> str:
    """``text`` with the absolute date added after each relative date in it, in parentheses.

    ``day`` is the message's local calendar day (:func:`local_date`). A text with no relative
    date comes back unchanged.
    """
    found: list[tuple[int, int, str]] = []
    for pattern, resolver in _RULES:
        for match in pattern.finditer(text):
            start, end = match.span()
            if any(start < other_end and other_start < end for other_start, other_end, _ in found):
                continue
            # Already followed by a date in parentheses (a fact extracted again): nothing to add.
            if re.match(r"\s*\(", text[end:]):
                continue
            found.append((start, end, _render(resolver(match, day), language)))
    if not found:
        return text
    pieces: list[str] = []
    position = 0
    for _start, end, rendered in sorted(found):
        pieces.append(text[position:end])
        pieces.append(f" ({rendered})")
        position = end
    pieces.append(text[position:])
    return "".join(pieces)
