"""Vectors sent to PostgreSQL as query parameters in pgvector's binary form.

Why not text
------------
``'[0.1,-0.2,...]'`` costs on both ends: Python prints 384 floats (about 35 us a vector, and
a stage writes or compares several per message: a seventh of an apply worker's Python time in
a burst) and PostgreSQL's ``vector_in`` parses them back. The binary form is the float32 values
as they are stored: a header (dimensions, 0) and big-endian floats, made by ``array`` in C and
read by ``vector_recv`` without parsing. pgvector's own Python package builds it
(:class:`pgvector.Vector` and its psycopg binary dumper).

How
---
pgvector's binary dumper is registered for :class:`~pgvector.Vector` on psycopg's global
adapters when this module is imported, without the type's OID (``register_vector`` would look it
up per connection); :mod:`memory_core.db.engine` imports it, so it is there
before any of the service's engines connects (a psycopg connection copies the global adapters
when it is made and would not see a later registration). The dumper declares no type (OID 0),
so the statement must say what the parameter is, as every statement here does:
``CAST(:vec AS vector)``, or an INSERT into a ``vector`` column. That keeps it independent of
the ``vector`` type's OID, which differs from one database to another (each test database
creates the extension anew).
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from pgvector import Vector
from pgvector.psycopg.vector import VectorBinaryDumper

__all__ = ["vector_param"]


def vector_param(values: Sequence[float] | None) -> Vector | None:
    """``values`` as a query parameter sent in binary; None (SQL NULL) for None or an empty vector."""
    return Vector(list(values)) if values else None


psycopg.adapters.register_dumper(Vector, VectorBinaryDumper)
