"""The memory explorer's session: an encrypted, HttpOnly cookie holding the API key it was opened with.

The cookie is a Fernet token (AES-128-CBC + HMAC-SHA256, with its issue time) of
``{"k": <api key>, "c": <CSRF token>, "s": <session id>}``, under a key derived from the operator
keys (``ARANDU_API_KEYS``): every API process derives the same one, and rotating the operator keys
ends every session. The browser's scripts cannot read it (HttpOnly), other sites cannot send it
(SameSite=Strict), and it is Secure over https.

Holding the key rather than a copy of its scope is what makes revocation work: every request
resolves the key again through :class:`api.auth.KeyResolver` (a revoked or expired tenant key
ends its sessions within ``ARANDU_API_KEY_CACHE_S``), and the scope is always the key's current one.
A session lasts ``ARANDU_UI_SESSION_TTL_S``.

Logging out ends the session on the server, not only in the browser: the session id is recorded
as ended in the broker's Redis (:class:`EndedSessions`, kept as long as a cookie can live) and
every request checks it, so a copy of the cookie taken before the logout is refused too. When
that record cannot be read (Redis does not answer, or the broker is not Redis) a cookie session
is refused rather than trusted: an ended session must never come back.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio
import redis.exceptions
from cryptography.fernet import Fernet, InvalidToken
from starlette.requests import Request
from starlette.responses import Response

from memory_core.settings import Settings
from workers.redis_client import async_redis_client_for, is_redis_url

COOKIE_NAME = "arandu_ui"
# The login form's own CSRF token (double submit: a cookie and a form field that must match).
LOGIN_COOKIE_NAME = "arandu_ui_login"
COOKIE_PATH = "/ui"
_DERIVATION_LABEL = b"arandu memory explorer session v1\x00"


@dataclass(frozen=True)
class UiSession:
    """What a valid cookie holds: the API key, the session's CSRF token and its id (what a logout ends)."""

    api_key: str
    csrf: str
    session_id: str


class SessionCodec:
    """Encrypts and reads session cookies for one set of operator keys."""

    def __init__(self, operator_keys: Sequence[bytes], ttl_s: int, secure: str) -> None:
        material = hashlib.sha256(_DERIVATION_LABEL + b"\x00".join(sorted(operator_keys))).digest()
        self._fernet = Fernet(base64.urlsafe_b64encode(material))
        self.ttl_s = ttl_s
        self.secure = secure

    def new_session(self, api_key: str) -> tuple[UiSession, str]:
        """A session for ``api_key`` with a fresh CSRF token, and its cookie value."""
        session = UiSession(api_key=api_key, csrf=secrets.token_urlsafe(32), session_id=secrets.token_urlsafe(18))
        payload = {"k": session.api_key, "c": session.csrf, "s": session.session_id}
        token = self._fernet.encrypt(json.dumps(payload).encode("utf-8"))
        return session, token.decode("ascii")

    def read(self, request: Request) -> UiSession | None:
        """The request's session, or None (no cookie, tampered, or older than the TTL)."""
        raw = request.cookies.get(COOKIE_NAME)
        if not raw:
            return None
        try:
            payload = json.loads(self._fernet.decrypt(raw.encode("ascii"), ttl=self.ttl_s))
            # A cookie without a session id (issued before logouts were recorded) is no session.
            return UiSession(api_key=str(payload["k"]), csrf=str(payload["c"]), session_id=str(payload["s"]))
        except (InvalidToken, UnicodeEncodeError, ValueError, KeyError, TypeError):
            return None

    def is_secure(self, request: Request) -> bool:
        """Whether cookies set on this request get the Secure attribute."""
        if self.secure == "always":
            return True
        if self.secure == "never":
            return False
        return request.url.scheme == "https"

    def set_cookie(self, response: Response, request: Request, value: str) -> None:
        """Set the session cookie on ``response``."""
        response.set_cookie(
            COOKIE_NAME,
            value,
            max_age=self.ttl_s,
            path=COOKIE_PATH,
            secure=self.is_secure(request),
            httponly=True,
            samesite="strict",
        )

    def clear_cookie(self, response: Response, request: Request) -> None:
        """Drop the session cookie."""
        response.delete_cookie(
            COOKIE_NAME, path=COOKIE_PATH, secure=self.is_secure(request), httponly=True, samesite="strict"
        )

    def set_login_cookie(self, response: Response, request: Request, token: str) -> None:
        """The login form's double-submit token (short-lived, same attributes as the session cookie)."""
        response.set_cookie(
            LOGIN_COOKIE_NAME,
            token,
            max_age=3600,
            path=COOKIE_PATH,
            secure=self.is_secure(request),
            httponly=True,
            samesite="strict",
        )


class SessionStoreUnavailable(Exception):  # noqa: N818 - a condition the pages report, not a bug
    """The record of ended sessions cannot be read or written (Redis does not answer, or there is no Redis)."""


class EndedSessions:
    """Session ids ended by a logout, in the broker's Redis, each kept as long as a cookie can live.

    ``{ARANDU_BROKER_KEY_PREFIX}arandu:ui:ended:<session id>``, expiring after the session TTL:
    by then the cookie's own time stamp refuses it, so the record is no longer needed.
    """

    def __init__(self, client: redis.asyncio.Redis | None, key_prefix: str, ttl_s: int) -> None:
        self._client = client
        self._prefix = f"{key_prefix}arandu:ui:ended:"
        self.ttl_s = ttl_s

    @classmethod
    def for_settings(cls, settings: Settings) -> EndedSessions:
        """The record on the broker's Redis; with another broker (RabbitMQ) none, and cookie sessions are refused."""
        client = (
            async_redis_client_for(settings.broker_url, socket_timeout_s=1.0)
            if is_redis_url(settings.broker_url)
            else None
        )
        return cls(client, settings.broker_key_prefix, settings.ui_session_ttl_s)

    def _require(self) -> redis.asyncio.Redis:
        if self._client is None:
            raise SessionStoreUnavailable("the broker is not Redis, so logouts cannot be recorded")
        return self._client

    async def is_ended(self, session_id: str) -> bool:
        """Whether a logout ended this session; :class:`SessionStoreUnavailable` when that cannot be known."""
        client = self._require()
        try:
            return bool(await client.exists(self._prefix + session_id))
        except (redis.exceptions.RedisError, OSError) as error:
            raise SessionStoreUnavailable(f"Redis does not answer ({type(error).__name__})") from error

    async def end(self, session_id: str) -> None:
        """Record the session as ended (for as long as its cookie could be used)."""
        client = self._require()
        try:
            await client.set(self._prefix + session_id, b"1", ex=self.ttl_s)
        except (redis.exceptions.RedisError, OSError) as error:
            raise SessionStoreUnavailable(f"Redis does not answer ({type(error).__name__})") from error

    async def close(self) -> None:
        """Close the Redis connections."""
        if self._client is not None:
            await self._client.aclose()
