"""A scriptable local server speaking the OpenAI HTTP API, for tests and benchmarks.

The real ``openai`` client talks to it over real HTTP, so request encoding, error
mapping, timeouts and retry headers are exercised end to end::

    with OpenAIStub() as stub:
        stub.enqueue_chat('{"facts": []}', StubReply.error(429, headers={"Retry-After": "7"}))
        provider = OpenAIChatProvider(api_key="sk-test", model="gpt-stub", base_url=stub.base_url)
        ...
        assert stub.chat_requests[0].body["response_format"] == {"type": "json_object"}

Replies come, per endpoint, from the scripted queue first, then from the
endpoint's handler callable (if any), then from the default (``{}`` for chat,
deterministic unit vectors of the requested dimension for embeddings).
``latency_s`` delays every answer (e.g. 0.5 to mimic a real provider); a reply's
``delay_s`` delays just that one (to trigger client timeouts).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import struct
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

__all__ = [
    "CHAT",
    "EMBEDDINGS",
    "OpenAIStub",
    "RecordedRequest",
    "ScriptedJSONServer",
    "StubReply",
    "approx_tokens",
    "schema_text",
    "stub_vector",
]

CHAT = "chat"
EMBEDDINGS = "embeddings"


def approx_tokens(text: str) -> int:
    """OpenAI's rule of thumb (about four characters a token), at least 1 for non-empty text."""
    return math.ceil(len(text) / 4) if text else 0


def schema_text(response_format: Any) -> str:
    """The JSON schema of a ``json_schema`` response format, compact (what a prompt pays for), else ``""``."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return ""
    schema = (response_format.get("json_schema") or {}).get("schema")
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":")) if schema else ""


def stub_vector(text: str, dimensions: int) -> list[float]:
    """A deterministic unit vector for ``text`` (the same in every process)."""
    values: list[float] = []
    for block in itertools.count():
        digest = hashlib.blake2b(f"{block}:{text}".encode(), digest_size=64).digest()
        values.extend(number / 2**31 - 1.0 for number in struct.unpack("<16I", digest))
        if len(values) >= dimensions:
            break
    values = values[:dimensions]
    norm = math.sqrt(sum(value * value for value in values)) or 1.0
    return [value / norm for value in values]


@dataclass(frozen=True)
class StubReply:
    """One scripted answer.

    ``content`` is the assistant text (chat) or ignored (embeddings); ``status``
    other than 200 sends an API error body with ``error_message``; ``body``
    replaces the whole JSON body; ``delay_s`` waits before answering;
    ``dimensions`` overrides the embedding length (to send a wrong one); ``usage``
    overrides the usage block.
    """

    content: str | None = None
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    error_message: str | None = None
    body: Any = None
    delay_s: float = 0.0
    dimensions: int | None = None
    usage: Mapping[str, Any] | None = None

    @classmethod
    def text(cls, content: str, **options: Any) -> StubReply:
        """A successful chat answer with ``content``."""
        return cls(content=content, **options)

    @classmethod
    def error(cls, status: int, message: str | None = None, headers: Mapping[str, str] | None = None) -> StubReply:
        """An API error with HTTP ``status`` (and e.g. ``{"Retry-After": "7"}``)."""
        return cls(status=status, error_message=message, headers=dict(headers or {}))

    @classmethod
    def slow(cls, delay_s: float, content: str = "{}") -> StubReply:
        """A successful answer sent only after ``delay_s`` seconds."""
        return cls(content=content, delay_s=delay_s)


ScriptItem = StubReply | str
Handler = Callable[[dict[str, Any]], StubReply | str | None]


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the server received it."""

    method: str
    path: str
    endpoint: str | None
    headers: dict[str, str]
    body: Any
    received_at: float


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Do not wait for handlers still sleeping on a scripted delay when stopping.
    block_on_close = False
    # Bursts of concurrent clients must queue, not be refused.
    request_queue_size = 256

    def __init__(self, stub: ScriptedJSONServer) -> None:
        self.stub = stub
        super().__init__(("127.0.0.1", 0), _RequestHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that time out and hang up are expected, not worth a traceback.
        return


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body go out as two writes: with Nagle's algorithm the body waited for the
    # client's delayed ACK of the head, ~40 ms added to every answer (a stall no real provider has).
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        return

    def do_POST(self) -> None:
        self._serve("POST")

    def do_GET(self) -> None:
        self._serve("GET")

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        status, headers, payload = self.server.stub.respond(method, self.path, dict(self.headers.items()), body)
        data = json.dumps(payload).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class ScriptedJSONServer:
    """Thread-safe machinery shared by the API stubs: routing, scripts, latency, recording.

    Subclasses map paths to endpoint names and render success and error bodies.
    """

    def __init__(self, *, latency_s: float = 0.0, api_key: str | None = None) -> None:
        self.latency_s = latency_s
        self.api_key = api_key
        self.handlers: dict[str, Handler] = {}
        self._lock = threading.Lock()
        self._scripts: dict[str, deque[ScriptItem]] = {}
        self._requests: list[RecordedRequest] = []
        self._closing = threading.Event()
        self._ids = itertools.count(1)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> Self:
        """Bind 127.0.0.1 on a free port and serve in a background thread."""
        if self._server is not None:
            return self
        self._closing.clear()
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name=type(self).__name__, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; requests still waiting on a delay are answered at once."""
        if self._server is None:
            return
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (the server must be started)."""
        if self._server is None:
            raise RuntimeError("the stub is not running")
        return int(self._server.server_address[1])

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:PORT`` without any API prefix."""
        return f"http://127.0.0.1:{self.port}"

    # -- scripting and inspection -------------------------------------------

    def enqueue(self, endpoint: str, *replies: ScriptItem) -> None:
        """Queue replies for ``endpoint``; each request takes the next one (a str is a content text)."""
        with self._lock:
            self._scripts.setdefault(endpoint, deque()).extend(replies)

    def pending(self, endpoint: str) -> int:
        """How many scripted replies for ``endpoint`` are still unused."""
        with self._lock:
            return len(self._scripts.get(endpoint, ()))

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    def requests_to(self, endpoint: str) -> list[RecordedRequest]:
        """The requests received by ``endpoint``."""
        return [request for request in self.requests if request.endpoint == endpoint]

    @property
    def call_count(self) -> int:
        """How many requests the server received."""
        with self._lock:
            return len(self._requests)

    def reset(self) -> None:
        """Forget recorded requests and unused scripted replies."""
        with self._lock:
            self._requests.clear()
            self._scripts.clear()

    # -- request handling ----------------------------------------------------

    def respond(self, method: str, path: str, headers: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        """Status, extra headers and JSON body for one request (called from handler threads)."""
        endpoint = self.route(method, path.split("?", 1)[0])
        # A refused request (see refusal) is answered without using up a scripted reply.
        refused = self.refusal(endpoint, body) if endpoint and isinstance(body, dict) else None
        with self._lock:
            self._requests.append(RecordedRequest(method, path, endpoint, headers, body, time.time()))
            script = self._scripts.get(endpoint) if endpoint and refused is None else None
            scripted = script.popleft() if script else None
        if endpoint is None:
            return 404, {}, self.error_body(404, f"no route for {method} {path}")
        if not self.authorised({name.lower(): value for name, value in headers.items()}):
            return 401, {}, self.error_body(401, "Incorrect API key provided.")
        if not isinstance(body, dict) and method == "POST":
            return 400, {}, self.error_body(400, "the request body must be a JSON object")
        request_body: dict[str, Any] = body if isinstance(body, dict) else {}
        if refused is not None:
            return 400, {}, self.error_body(400, refused)
        reply = self._choose(endpoint, scripted, request_body)
        wait = self.latency_s + reply.delay_s
        if wait > 0:
            self._closing.wait(wait)
        if reply.status != 200:
            message = reply.error_message or f"stub error {reply.status}"
            return reply.status, dict(reply.headers), reply.body or self.error_body(reply.status, message)
        payload = reply.body if reply.body is not None else self.success_body(endpoint, request_body, reply)
        return 200, dict(reply.headers), payload

    def _choose(self, endpoint: str, scripted: ScriptItem | None, body: dict[str, Any]) -> StubReply:
        item: StubReply | str | None = scripted
        if item is None and endpoint in self.handlers:
            item = self.handlers[endpoint](body)
        if item is None:
            return StubReply()
        return StubReply(content=item) if isinstance(item, str) else item

    def next_id(self) -> int:
        """A fresh number for response ids."""
        with self._lock:
            return next(self._ids)

    # -- what subclasses define ----------------------------------------------

    def refusal(self, endpoint: str, body: dict[str, Any]) -> str | None:
        """A 400 message when the request uses something this server is set to refuse (nothing by default)."""
        return None

    def route(self, method: str, path: str) -> str | None:
        """The endpoint name serving ``method path``, or None for a 404."""
        raise NotImplementedError

    def authorised(self, headers: dict[str, str]) -> bool:
        """Whether the (lower-cased) request headers carry the expected key."""
        return True

    def success_body(self, endpoint: str, body: dict[str, Any], reply: StubReply) -> Any:
        """The JSON body of a successful answer."""
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> Any:
        """The JSON body of an error answer."""
        raise NotImplementedError


_OPENAI_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


class OpenAIStub(ScriptedJSONServer):
    """The OpenAI API subset the service uses: chat completions, embeddings and the model list.

    ``base_url`` ("http://127.0.0.1:PORT/v1") is what ``OpenAI(base_url=...)`` takes.
    Pass ``api_key`` to make it answer 401 to any other bearer token.
    """

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        api_key: str | None = None,
        default_dimensions: int = 1536,
        chat_handler: Handler | None = None,
        embeddings_handler: Handler | None = None,
        prefix_cache: bool = False,
    ) -> None:
        super().__init__(latency_s=latency_s, api_key=api_key)
        self.default_dimensions = default_dimensions
        #: Report ``prompt_tokens_details.cached_tokens`` as OpenAI's prompt cache would (see _cached_tokens).
        self.prefix_cache = prefix_cache
        self._seen_prefixes: set[str] = set()
        #: Sums of the usage blocks of the chat answers sent (prompt_tokens, completion_tokens, cached_tokens).
        self.chat_usage: Counter[str] = Counter()
        #: Answer 400 to these chat ``response_format`` types, as servers without structured outputs do
        #: (``{"json_schema"}``: an Ollama or vLLM build without guided decoding; add ``"json_object"``: no JSON mode).
        self.refused_formats: set[str] = set()
        if chat_handler is not None:
            self.handlers[CHAT] = chat_handler
        if embeddings_handler is not None:
            self.handlers[EMBEDDINGS] = embeddings_handler

    @property
    def base_url(self) -> str:
        """The API root for the OpenAI client, ending in ``/v1``."""
        return self.root_url + "/v1"

    def enqueue_chat(self, *replies: ScriptItem) -> None:
        """Queue chat completion replies (a str is the assistant's content)."""
        self.enqueue(CHAT, *replies)

    def enqueue_embeddings(self, *replies: ScriptItem) -> None:
        """Queue embedding replies."""
        self.enqueue(EMBEDDINGS, *replies)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """Requests received by ``/v1/chat/completions``."""
        return self.requests_to(CHAT)

    @property
    def embedding_requests(self) -> list[RecordedRequest]:
        """Requests received by ``/v1/embeddings``."""
        return self.requests_to(EMBEDDINGS)

    def route(self, method: str, path: str) -> str | None:
        """Map the OpenAI paths (with or without the ``/v1`` prefix) to endpoint names."""
        path = path.removeprefix("/v1")
        if method == "POST" and path == "/chat/completions":
            return CHAT
        if method == "POST" and path == "/embeddings":
            return EMBEDDINGS
        if method == "GET" and path == "/models":
            return "models"
        return None

    def refusal(self, endpoint: str, body: dict[str, Any]) -> str | None:
        """A 400 naming the ``response_format`` type when it is one of :attr:`refused_formats`."""
        response_format = body.get("response_format")
        if endpoint != CHAT or not isinstance(response_format, dict):
            return None
        kind = str(response_format.get("type"))
        if kind in self.refused_formats:
            return f"response_format type {kind!r} is not supported by this server"
        return None

    def authorised(self, headers: dict[str, str]) -> bool:
        """Bearer-token check when the stub was given an ``api_key``."""
        return self.api_key is None or headers.get("authorization") == f"Bearer {self.api_key}"

    def success_body(self, endpoint: str, body: dict[str, Any], reply: StubReply) -> Any:
        """Realistic ``chat.completion``, embedding ``list`` or model ``list`` bodies."""
        model = str(body.get("model", "gpt-stub"))
        if endpoint == CHAT:
            return self._chat_body(model, body, reply)
        if endpoint == EMBEDDINGS:
            return self._embeddings_body(model, body, reply)
        return {"object": "list", "data": [{"id": "gpt-stub", "object": "model", "created": 0, "owned_by": "stub"}]}

    def error_body(self, status: int, message: str) -> Any:
        """OpenAI's ``{"error": {...}}`` shape."""
        kind, code = _OPENAI_ERROR_TYPES.get(
            status, ("server_error" if status >= 500 else "invalid_request_error", None)
        )
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def _chat_body(self, model: str, body: dict[str, Any], reply: StubReply) -> dict[str, Any]:
        content = "{}" if reply.content is None else reply.content
        messages = body.get("messages") or []
        prompt_tokens = sum(approx_tokens(str(message.get("content", ""))) + 4 for message in messages)
        # A strict schema is part of the prompt the model reads: OpenAI counts it in prompt_tokens.
        prompt_tokens += approx_tokens(schema_text(body.get("response_format")))
        completion_tokens = approx_tokens(content)
        usage = dict(
            reply.usage
            or {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
        )
        if self.prefix_cache and reply.usage is None:
            usage["prompt_tokens_details"] = {"cached_tokens": self._cached_tokens(body, prompt_tokens)}
        with self._lock:
            self.chat_usage.update(
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                cached_tokens=int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0),
            )
        return {
            "id": f"chatcmpl-stub-{self.next_id()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": "fp_stub",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }

    def _cached_tokens(self, body: dict[str, Any], prompt_tokens: int) -> int:
        """What OpenAI's automatic prompt cache would serve: its rule, applied to the stable prefix only.

        The prefix is the schema and the system message (what a skill sends the same on every call);
        it is served from the cache when a request sent it before, the prompt is 1,024 tokens or
        more, and then in 128-token steps from 1,024 (a shorter prefix is never cached).
        """
        messages = body.get("messages") or []
        system = str(messages[0].get("content", "")) if messages and messages[0].get("role") == "system" else ""
        schema = schema_text(body.get("response_format"))
        prefix_tokens = approx_tokens(schema) + approx_tokens(system) + 4
        key = hashlib.blake2b(f"{schema}\x00{system}".encode(), digest_size=16).hexdigest()
        with self._lock:
            seen = key in self._seen_prefixes
            self._seen_prefixes.add(key)
        if not seen or prompt_tokens < 1024 or prefix_tokens < 1024:
            return 0
        return min(prefix_tokens, prompt_tokens) // 128 * 128

    def _embeddings_body(self, model: str, body: dict[str, Any], reply: StubReply) -> dict[str, Any]:
        raw_input = body.get("input", [])
        texts = [raw_input] if isinstance(raw_input, str) else [str(item) for item in raw_input]
        dimensions = reply.dimensions or int(body.get("dimensions") or self.default_dimensions)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            vector = stub_vector(text, dimensions)
            encoded: Any = vector
            if as_base64:
                encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(approx_tokens(text) for text in texts)
        usage = dict(reply.usage or {"prompt_tokens": tokens, "total_tokens": tokens})
        return {"object": "list", "data": data, "model": model, "usage": usage}
