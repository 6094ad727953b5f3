"""The memory explorer: server-rendered pages at ``/ui/`` over the same data and key scopes as ``/v1``."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from api.auth import encode_keys
from api.ui.routes import (
    STATIC_DIR,
    UI_PREFIX,
    LoginRequired,
    UiForbidden,
    forbidden_handler,
    login_required_handler,
    router,
)
from api.ui.session import EndedSessions, SessionCodec
from memory_core.settings import Settings

__all__ = ["close_ui", "install_ui"]


def install_ui(app: FastAPI, settings: Settings) -> None:
    """Add the explorer's pages, its static files (``/ui/static/``) and its error handlers to ``app``."""
    app.state.ui_sessions = SessionCodec(
        encode_keys(settings.api_keys), ttl_s=settings.ui_session_ttl_s, secure=settings.ui_cookie_secure
    )
    app.state.ui_ended_sessions = EndedSessions.for_settings(settings)
    app.add_exception_handler(LoginRequired, login_required_handler)
    app.add_exception_handler(UiForbidden, forbidden_handler)
    # Static files (one stylesheet, one script) are the service's own code, not memory: served
    # to the login page too.
    app.mount(f"{UI_PREFIX}/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    app.include_router(router)


async def close_ui(app: FastAPI) -> None:
    """Release what :func:`install_ui` opened (the Redis connections of the ended-sessions record)."""
    ended: EndedSessions = app.state.ui_ended_sessions
    await ended.close()
