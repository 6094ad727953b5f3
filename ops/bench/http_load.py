"""A load generator that leaves the machine to the stack: pre-built HTTP/1.1 requests on keep-alive connections.

The benchmarks run their clients on the same two cores as the stack they measure, so a client
that spends milliseconds of CPU per request measures itself: 32 httpx clients spent 12.7 ms per
POST (the closed loop then answered 61 requests/s), a client reading the answer through
asyncio streams line by line 1.4 ms. Here each connection is an :class:`asyncio.Protocol` that
writes a request built in advance and reads the status, ``Content-Length`` and body of the
answer straight from the bytes it is given: tens of microseconds per request, as a C load
generator (wrk) costs.

Latency is counted per request from the moment it is written, or with ``rate`` (an open loop)
from the moment it was due, so time spent waiting for a free connection counts too (no
coordinated omission).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

__all__ = ["LoadOutcome", "send_all"]

_HEAD_END = b"\r\n\r\n"
_LENGTH = b"\r\ncontent-length:"
_CLOSE = b"\r\nconnection: close"


@dataclass
class LoadOutcome:
    """Per-request latencies (seconds) of the answered requests, and what went wrong with the others."""

    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # The status of each answered request, in the order of ``latencies``.
    statuses: list[int] = field(default_factory=list)
    # With ``keep_bodies``: each answered request's body, by its index in ``requests``.
    bodies: dict[int, bytes] = field(default_factory=dict)


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request at a time, its answer parsed from the bytes received."""

    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self.buffer = bytearray()
        self.answer: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; both can write.
        self.transport = cast(asyncio.WriteTransport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        answer = self.answer
        if answer is None or answer.done():
            return
        end = self.buffer.find(_HEAD_END)
        if end < 0:
            return
        head = bytes(self.buffer[:end]).lower()
        start = head.find(_LENGTH)
        if start < 0:
            answer.set_exception(ValueError(f"an answer without Content-Length: {head[:80]!r}"))
            return
        stop = head.find(b"\r\n", start + 2)
        length = int(head[start + len(_LENGTH) : stop if stop >= 0 else len(head)])
        total = end + len(_HEAD_END) + length
        if len(self.buffer) < total:
            return
        body = bytes(self.buffer[end + len(_HEAD_END) : total])
        del self.buffer[:total]
        answer.set_result((int(head[9:12]), body, _CLOSE in head))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(ConnectionError(f"the server closed the connection ({exc})"))

    async def exchange(self, request: bytes) -> tuple[int, bytes, bool]:
        """Write ``request`` and wait for its answer: (status, body, whether the server closes)."""
        assert self.transport is not None
        self.answer = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.answer

    def close(self) -> None:
        """Close the connection."""
        if self.transport is not None:
            self.transport.close()


async def send_all(
    base_url: str,
    headers: Mapping[str, str],
    requests: Sequence[tuple[str, bytes]],
    *,
    concurrency: int,
    method: str = "POST",
    expect: int = 202,
    rate: float | None = None,
    stop: asyncio.Event | None = None,
    keep_bodies: bool = False,
) -> LoadOutcome:
    """Send every ``(path, body)`` over ``concurrency`` keep-alive connections; latencies and errors.

    Closed loop by default (each connection sends its next request once answered). With
    ``rate`` (requests per second) request *i* is due at ``i / rate`` seconds from the start
    whatever the answers before it, and its latency counts from then. An answer whose status
    is not ``expect`` is an error (with the start of its body). With ``stop``, no request is
    sent once it is set (a background load that lasts as long as another one). With
    ``keep_bodies`` the answers' bodies are kept (``outcome.bodies``), to be read after the load.
    """
    host, port = base_url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    head = "".join(f"{name}: {value}\r\n" for name, value in {"Host": f"{host}:{port}", **headers}.items())
    built = [
        f"{method} {path} HTTP/1.1\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body
        for path, body in requests
    ]
    outcome = LoadOutcome()
    queue: Iterator[tuple[int, bytes]] = iter(enumerate(built))
    loop = asyncio.get_running_loop()
    origin = time.perf_counter()

    async def connection() -> None:
        current: _Connection | None = None
        for index, request in queue:
            if stop is not None and stop.is_set():
                break
            started = time.perf_counter()
            if rate is not None:
                due = origin + index / rate
                if due > started:
                    await asyncio.sleep(due - started)
                started = due
            try:
                if current is None or current.closed:
                    _, current = await loop.create_connection(_Connection, host, int(port))
                status, body, closing = await current.exchange(request)
            except (OSError, ValueError) as error:
                outcome.errors.append(f"{type(error).__name__}: {error}")
                if current is not None:
                    current.close()
                current = None
                continue
            outcome.latencies.append(time.perf_counter() - started)
            outcome.statuses.append(status)
            if keep_bodies:
                outcome.bodies[index] = body
            if status != expect:
                outcome.errors.append(f"{status}: {body[:200].decode(errors='replace')}")
            if closing:
                current.close()
                current = None
        if current is not None:
            current.close()

    await asyncio.gather(*(connection() for _ in range(concurrency)))
    return outcome
