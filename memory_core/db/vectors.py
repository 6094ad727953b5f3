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

Arrays of vectors
-----------------
A statement that takes several vectors (a message's entities, a chunk's events or candidate
searches) binds a :class:`VectorArray`: one binary ``vector[]`` parameter, about a fifth of the
client CPU of the same vectors printed as a ``text[]`` of literals and with no parsing on the
server. An array's elements must carry the type's OID, so each of the service's connections
learns it once (:func:`register_vector_type`, run by :mod:`memory_core.db.engine` when a pooled
connection is first checked out). psycopg sends lists as text unless told otherwise, hence the
``list`` subclass that is registered for the binary array dumper.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

import psycopg
from pgvector import Vector
from pgvector.psycopg.vector import VectorBinaryDumper
from psycopg.types import TypeInfo
from psycopg.types.array import ListBinaryDumper

__all__ = ["VectorArray", "register_vector_type", "vector_array", "vector_param"]


def vector_param(values: Sequence[float] | None) -> Vector | None:
    """``values`` as a query parameter sent in binary; None (SQL NULL) for None or an empty vector."""
    return Vector(list(values)) if values else None


class VectorArray(list[Vector | None]):
    """Vectors (None for NULL) bound as one binary ``vector[]``: ``CAST(:vecs AS vector[])``."""


def vector_array(vectors: Iterable[Sequence[float] | None]) -> VectorArray:
    """``vectors`` as one ``vector[]`` parameter (a None or empty vector is a NULL element)."""
    return VectorArray(vector_param(values) for values in vectors)


def register_vector_type(connection: psycopg.Connection[Any]) -> bool:
    """Teach ``connection`` the ``vector`` type's OID, so that :class:`VectorArray` can be sent.

    One catalogue query. False when the database has no ``vector`` type yet (the extension is
    created by the first migration): the caller asks again on a later use.
    """
    info = TypeInfo.fetch(connection, "vector")
    if info is None:
        return False
    info.register(connection)
    connection.adapters.register_dumper(Vector, _typed_dumper(info.oid))
    connection.adapters.register_dumper(VectorArray, ListBinaryDumper)
    return True


@lru_cache(maxsize=64)
def _typed_dumper(oid: int) -> type[VectorBinaryDumper]:
    """pgvector's binary dumper declaring the type's OID (one class per database's OID, not per connection)."""
    return type("TypedVectorBinaryDumper", (VectorBinaryDumper,), {"oid": oid})


psycopg.adapters.register_dumper(Vector, VectorBinaryDumper)
