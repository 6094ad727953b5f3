"""Vectors sent to PostgreSQL as query parameters in pgvector's binary form.

Why not text
------------
``'[0.1,-0.2,...]'`` costs on both ends: Python prints 384 floats (about 35 us a vector, and
a stage writes or compares several per message: a seventh of an apply worker's Python time in
a burst) and PostgreSQL's ``vector_in`` parses them back. The binary form is the float32 values
as they are stored: a header (dimensions, 0) and big-endian floats, made by ``array`` in C and
read by ``vector_recv`` without parsing.

How
---
:class:`VectorParam` is dumped by a psycopg binary dumper registered on psycopg's global
adapters when this module is imported; :mod:`memory_core.db.engine` imports it, so it is there
before any of the service's engines connects (a psycopg connection copies the global adapters
when it is made and would not see a later registration). The dumper declares no type (OID 0),
so the statement must say what the parameter is, as every statement here does:
``CAST(:vec AS vector)``, or an INSERT into a ``vector`` column. That keeps it independent of
the ``vector`` type's OID, which differs from one database to another (each test database
creates the extension anew).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

__all__ = ["VectorParam", "vector_param"]

_HEADER = struct.Struct(">HH")


class VectorParam:
    """A vector as a query parameter: pgvector's binary form, made once."""

    __slots__ = ("dimensions", "payload")

    def __init__(self, values: Sequence[float]) -> None:
        floats = array("f", values)
        if sys.byteorder == "little":
            floats.byteswap()
        self.dimensions = len(floats)
        self.payload = _HEADER.pack(len(floats), 0) + floats.tobytes()

    def __repr__(self) -> str:
        return f"VectorParam({self.dimensions} dimensions)"


def vector_param(values: Sequence[float] | None) -> VectorParam | None:
    """``values`` as a :class:`VectorParam`; None (SQL NULL) for None or an empty vector."""
    return VectorParam(values) if values else None


class _VectorParamDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: VectorParam) -> bytes:
        return obj.payload


psycopg.adapters.register_dumper(VectorParam, _VectorParamDumper)
