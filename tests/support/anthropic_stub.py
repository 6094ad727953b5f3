"""A scriptable local server for the Anthropic Messages API (``POST /v1/messages``).

Same scripting model as :class:`tests.support.openai_stub.OpenAIStub`::

    with AnthropicStub() as stub:
        stub.enqueue_messages('```json\\n{"ok": true}\\n```')
        provider = AnthropicChatProvider(api_key="sk-ant-test", model="claude-stub", base_url=stub.base_url)
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.support.openai_stub import RecordedRequest, ScriptedJSONServer, ScriptItem, StubReply, approx_tokens

__all__ = ["MESSAGES", "AnthropicStub"]

MESSAGES = "messages"

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return ""


class AnthropicStub(ScriptedJSONServer):
    """Answers ``POST /v1/messages`` like the Anthropic API; default answer ``{}``.

    ``base_url`` ("http://127.0.0.1:PORT") is what ``Anthropic(base_url=...)`` takes.
    Pass ``api_key`` to make it answer 401 to any other key.
    """

    @property
    def base_url(self) -> str:
        """The API root for the Anthropic client (the client adds ``/v1``)."""
        return self.root_url

    def enqueue_messages(self, *replies: ScriptItem) -> None:
        """Queue replies (a str is the assistant's text)."""
        self.enqueue(MESSAGES, *replies)

    @property
    def message_requests(self) -> list[RecordedRequest]:
        """Requests received by ``/v1/messages``."""
        return self.requests_to(MESSAGES)

    def route(self, method: str, path: str) -> str | None:
        """Only ``POST /v1/messages`` exists."""
        return MESSAGES if method == "POST" and path == "/v1/messages" else None

    def authorised(self, headers: dict[str, str]) -> bool:
        """Key check when the stub was given an ``api_key`` (``x-api-key``, or a bearer token as SDK 2.x sends)."""
        if self.api_key is None:
            return True
        return self.api_key in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))

    def success_body(self, endpoint: str, body: dict[str, Any], reply: StubReply) -> Any:
        """A realistic ``message`` body with one text block and usage."""
        text = "{}" if reply.content is None else reply.content
        prompt = _text_of(body.get("system")) + "".join(
            _text_of(message.get("content")) for message in body.get("messages", []) if isinstance(message, dict)
        )
        # Tool definitions are part of the prompt Claude reads: Anthropic counts them as input tokens.
        prompt += "".join(
            json.dumps(tool, ensure_ascii=False, separators=(",", ":")) for tool in body.get("tools") or []
        )
        usage = dict(reply.usage or {"input_tokens": approx_tokens(prompt), "output_tokens": approx_tokens(text)})
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        stop_reason = "end_turn"
        forced = body.get("tool_choice") or {}
        if forced.get("type") == "tool":
            # A forced tool: the scripted content (JSON) becomes the tool call's input, as Claude answers.
            try:
                tool_input = json.loads(text)
            except ValueError:
                tool_input = {"unparsable": text}
            call_id = f"toolu_stub_{self.next_id()}"
            content = [{"type": "tool_use", "id": call_id, "name": forced["name"], "input": tool_input}]
            stop_reason = "tool_use"
        return {
            "id": f"msg_stub_{self.next_id()}_{int(time.time())}",
            "type": "message",
            "role": "assistant",
            "model": str(body.get("model", "claude-stub")),
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }

    def error_body(self, status: int, message: str) -> Any:
        """Anthropic's ``{"type": "error", "error": {...}}`` shape."""
        kind = _ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
