"""The memory explorer's session: an encrypted, HttpOnly cookie holding the API key it was opened with.

The cookie is a Fernet token (AES-128-CBC + HMAC-SHA256, with its issue time) of
``{"k": <api key>, "c": <CSRF token>}``, under a key derived from the operator keys
(``ARANDU_API_KEYS``): every API process derives the same one, nothing is stored server-side,
and rotating the operator keys ends every session. The browser's scripts cannot read it
(HttpOnly), other sites cannot send it (SameSite=Strict), and it is Secure over https.

Holding the key rather than a copy of its scope is what makes revocation work: every request
resolves the key again through :class:`api.auth.KeyResolver` (a revoked or expired tenant key
ends its sessions within ``ARANDU_API_KEY_CACHE_S``), and the scope is always the key's current one.
A session lasts ``ARANDU_UI_SESSION_TTL_S``; logging out drops the cookie.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken
from starlette.requests import Request
from starlette.responses import Response

COOKIE_NAME = "arandu_ui"
# The login form's own CSRF token (double submit: a cookie and a form field that must match).
LOGIN_COOKIE_NAME = "arandu_ui_login"
COOKIE_PATH = "/ui"
_DERIVATION_LABEL = b"arandu memory explorer session v1\x00"


@dataclass(frozen=True)
class UiSession:
    """What a valid cookie holds: the API key and the session's CSRF token."""

    api_key: str
    csrf: str


class SessionCodec:
    """Encrypts and reads session cookies for one set of operator keys."""

    def __init__(self, operator_keys: Sequence[bytes], ttl_s: int, secure: str) -> None:
        material = hashlib.sha256(_DERIVATION_LABEL + b"\x00".join(sorted(operator_keys))).digest()
        self._fernet = Fernet(base64.urlsafe_b64encode(material))
        self.ttl_s = ttl_s
        self.secure = secure

    def new_session(self, api_key: str) -> tuple[UiSession, str]:
        """A session for ``api_key`` with a fresh CSRF token, and its cookie value."""
        session = UiSession(api_key=api_key, csrf=secrets.token_urlsafe(32))
        token = self._fernet.encrypt(json.dumps({"k": session.api_key, "c": session.csrf}).encode("utf-8"))
        return session, token.decode("ascii")

    def read(self, request: Request) -> UiSession | None:
        """The request's session, or None (no cookie, tampered, or older than the TTL)."""
        raw = request.cookies.get(COOKIE_NAME)
        if not raw:
            return None
        try:
            payload = json.loads(self._fernet.decrypt(raw.encode("ascii"), ttl=self.ttl_s))
            return UiSession(api_key=str(payload["k"]), csrf=str(payload["c"]))
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
