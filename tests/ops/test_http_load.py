"""The benchmarks' low-CPU load generator against a real HTTP server (uvicorn, real sockets)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from ops.bench.http_load import send_all


async def _echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers 202 with the body's length and the Authorization header; /close asks to close, /slow waits."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = dict(scope["headers"])
    if scope["path"] == "/slow":
        await asyncio.sleep(0.2)
    answer = json.dumps({"length": len(body), "auth": headers.get(b"authorization", b"").decode()}).encode()
    response_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
    if scope["path"] == "/close":
        response_headers.append((b"connection", b"close"))
    await send(
        {
            "type": "http.response.start",
            "status": 404 if scope["path"] == "/missing" else 202,
            "headers": response_headers,
        }
    )
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(_echo_app, log_level="warning", access_log=False, lifespan="off")
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not running.started:
        assert time.monotonic() < deadline, "the test server did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    running.should_exit = True
    thread.join(timeout=10)
    sock.close()


def test_every_request_is_sent_once_and_answered(server: str) -> None:
    requests = [("/echo", b"x" * size) for size in range(1, 101)]
    outcome = asyncio.run(send_all(server, {"Authorization": "Bearer k"}, requests, concurrency=8))
    assert outcome.errors == []
    assert len(outcome.latencies) == 100
    assert all(0 < latency < 5 for latency in outcome.latencies)


def test_kept_bodies_are_the_answers_of_each_request_by_its_index(server: str) -> None:
    requests = [("/echo", b"x" * size) for size in range(1, 21)]
    outcome = asyncio.run(send_all(server, {}, requests, concurrency=4, keep_bodies=True))
    assert outcome.errors == []
    assert {index: json.loads(body)["length"] for index, body in outcome.bodies.items()} == {
        index: index + 1 for index in range(20)
    }
    assert asyncio.run(send_all(server, {}, requests[:2], concurrency=1)).bodies == {}


def test_an_unexpected_status_is_an_error_with_the_answer(server: str) -> None:
    outcome = asyncio.run(send_all(server, {}, [("/missing", b"{}")] * 3, concurrency=2))
    assert len(outcome.latencies) == 3
    assert len(outcome.errors) == 3
    assert outcome.errors[0].startswith("404: ")
    assert '"length": 2' in outcome.errors[0]


def test_a_server_that_closes_each_connection_is_reconnected_to(server: str) -> None:
    outcome = asyncio.run(send_all(server, {}, [("/close", b"{}")] * 20, concurrency=3))
    assert outcome.errors == []
    assert len(outcome.latencies) == 20


def test_an_open_loop_counts_latency_from_when_each_request_was_due(server: str) -> None:
    # One connection, 5 requests due 10 ms apart, each answered after 200 ms: the requests
    # queue behind each other, and the last one's latency includes its wait for the connection.
    started = time.perf_counter()
    outcome = asyncio.run(send_all(server, {}, [("/slow", b"{}")] * 5, concurrency=1, rate=100.0))
    wall = time.perf_counter() - started
    assert outcome.errors == []
    assert wall >= 5 * 0.2
    latencies = outcome.latencies
    assert latencies[0] == pytest.approx(0.2, abs=0.1)
    # Due at 40 ms, sent after the four before it (~800 ms): ~1 s from its due time.
    assert latencies[-1] == pytest.approx(5 * 0.2 - 0.04, abs=0.15)
