"""The memory explorer's pages (``/ui/``): server-rendered HTML over the same reads and scopes as ``/v1``.

Who may see what is decided exactly as for the JSON API: a request carries either the session
cookie (a browser, :mod:`api.ui.session`) or an ``Authorization: Bearer`` header (a script);
either way the key is resolved by :class:`api.auth.KeyResolver` on every request, a page of an
agent needs a key covering that agent with ``read``, deleting a fact needs ``write`` and
re-driving an event or running a job ``admin``. Without a valid key the only page served is the
login page: HTML requests are redirected to it, others get ``401``.

Every POST form carries the session's CSRF token (and the cookie is SameSite=Strict); a
request authenticated by a Bearer header needs none, since no browser adds that header on its own.
Every value is escaped by the templates' autoescaping, and the Content-Security-Policy allows
only this service's own script and style files, so stored text can never run as code.
"""

from __future__ import annotations

import hmac
import json
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Depends, Request
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, RedirectResponse, Response

from api.auth import require_api_key
from api.dependencies import get_state
from api.errors import ApiError
from api.routes.messages import AgentId
from api.run_errors import client_error
from api.ui.graph import radial_layout
from api.ui.session import (
    COOKIE_NAME,
    COOKIE_PATH,
    LOGIN_COOKIE_NAME,
    EndedSessions,
    SessionCodec,
    SessionStoreUnavailable,
    UiSession,
)
from memory_core.agent_config import StoredAgentConfig, check_agent_overrides, read_agent_config
from memory_core.api_keys import KeyScope, Permission
from memory_core.config import ConfigOverrideError, MemoryConfig
from memory_core.maintenance.registry import JOB_NAMES
from memory_core.maintenance.runs import list_runs, request_run, skip_queued_run
from memory_core.read.explorer import (
    COUNT_CAP,
    Cursor,
    EntityOrder,
    EventFilter,
    entity_facts,
    entity_types,
    event_agent,
    fact_histories,
    list_agent_events,
    list_agent_imports,
    list_agents,
    list_entity_rows,
    neighbours,
    recent_facts,
)
from memory_core.read.management import delete_fact, get_entity
from memory_core.write.runs import redrive
from memory_core.write.schemas import STAGE_INPUT_STATUS
from workers.tasks.maintenance import release_stale_guards, send_job_run

UI_PREFIX = "/ui"
STATIC_DIR = Path(__file__).parent / "static"
_TEMPLATES = Path(__file__).parent / "templates"
MAX_FORM_BYTES = 64 * 1024
PAGE_SIZE = 25
# The entity page's facts valid now (or at as_of) come 50 to a page, with their histories.
ACTIVE_FACTS_PAGE = 50
MAX_PAGE_SIZE = 100
MAX_QUERY_CHARS = 2000

# Only this service's own files: stored text can never become a script, a style or a frame.
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class LoginRequired(Exception):  # noqa: N818 - a signal to the handler, not an error of the program
    """No valid session: HTML requests go to the login page, others get 401."""

    def __init__(self, *, clear_cookie: bool = False) -> None:
        super().__init__("login required")
        self.clear_cookie = clear_cookie


class UiForbidden(Exception):  # noqa: N818
    """The key may not do this (403, shown as a page)."""

    def __init__(self, message: str, status_code: int = 403) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code


def _format_time(value: datetime | None) -> str:
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _shorten(value: str | None, length: int = 160) -> str:
    if value is None:
        return ""
    return value if len(value) <= length else value[: length - 1] + "…"


def _pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str, sort_keys=True)


templates = Environment(
    loader=FileSystemLoader(_TEMPLATES),
    autoescape=select_autoescape(enabled_extensions=("html", "svg"), default=True),
    auto_reload=False,
)
templates.filters["ts"] = _format_time
templates.filters["shorten"] = _shorten
templates.filters["pretty"] = _pretty_json
templates.globals["COUNT_CAP"] = COUNT_CAP


@dataclass(frozen=True)
class Viewer:
    """Who is looking: the key's scope, and the session's CSRF token and id (empty for Bearer requests)."""

    scope: KeyScope
    csrf: str
    via_cookie: bool
    session_id: str = ""


def codec(request: Request) -> SessionCodec:
    """The app's session codec."""
    session_codec: SessionCodec = request.app.state.ui_sessions
    return session_codec


def ended_sessions(request: Request) -> EndedSessions:
    """The app's record of sessions ended by a logout."""
    ended: EndedSessions = request.app.state.ui_ended_sessions
    return ended


_STORE_DOWN = (
    "The explorer cannot check that this session was not logged out ({reason}), so it is not used: "
    "try again in a moment. Scripts may send 'Authorization: Bearer <key>' instead of the cookie."
)


async def _open_session(request: Request, session: UiSession) -> None:
    """Refuse a session a logout ended, and any session while that cannot be checked (fail closed)."""
    try:
        ended = await ended_sessions(request).is_ended(session.session_id)
    except SessionStoreUnavailable as error:
        raise UiForbidden(_STORE_DOWN.format(reason=error), 503) from None
    if ended:
        raise LoginRequired(clear_cookie=True)


async def current_viewer(request: Request) -> Viewer:
    """The request's viewer, from its Bearer header or its session cookie; :class:`LoginRequired` otherwise."""
    if request.headers.get("authorization"):
        scope = await require_api_key(request)  # a script: JSON 401/429 like the API
        return Viewer(scope=scope, csrf="", via_cookie=False)
    session = codec(request).read(request)
    if session is None:
        raise LoginRequired(clear_cookie=COOKIE_NAME in request.cookies)
    await _open_session(request, session)
    try:
        scope = await get_state(request).keys.resolve(session.api_key)
    except ApiError as error:
        if error.status_code == 401:  # revoked, expired, or the operator keys changed
            raise LoginRequired(clear_cookie=True) from None
        raise
    request.state.key_scope = scope
    return Viewer(scope=scope, csrf=session.csrf, via_cookie=True, session_id=session.session_id)


CurrentViewer = Annotated[Viewer, Depends(current_viewer)]


def _needs(viewer: Viewer, agent_id: str, permission: Permission) -> None:
    if not viewer.scope.covers(agent_id):
        # The same answer whether the agent has memory or not.
        raise UiForbidden(f"API key {viewer.scope.name!r} may not see agent {agent_id!r}")
    if not viewer.scope.allows(permission):
        raise UiForbidden(f"API key {viewer.scope.name!r} lacks the {permission!r} permission")


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (first value of each field), at most 64 KiB."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise UiForbidden("form too large", 413)
    parsed = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {name: values[0] for name, values in parsed.items() if values}


async def checked_form(request: Request, viewer: Viewer) -> dict[str, str]:
    """The form of a POST after its CSRF check (403 when the token is missing or wrong)."""
    form = await read_form(request)
    if viewer.via_cookie and not hmac.compare_digest(form.get("csrf", "").encode(), viewer.csrf.encode()):
        raise UiForbidden("the form's CSRF token is missing or wrong: reload the page and try again")
    return form


def render(
    request: Request, template: str, context: Mapping[str, Any], *, status_code: int = 200, viewer: Viewer | None = None
) -> HTMLResponse:
    """A page, with the security headers."""
    page = templates.get_template(template).render(
        {**context, "viewer": viewer, "csrf": viewer.csrf if viewer else "", "path": request.url.path}
    )
    return HTMLResponse(page, status_code=status_code, headers=_SECURITY_HEADERS)


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def _safe_next(raw: str | None) -> str:
    # Only a path of this UI: never another host (//evil) nor a scheme.
    if raw and raw.startswith(UI_PREFIX + "/") and not raw.startswith("//") and "\\" not in raw:
        return raw
    return UI_PREFIX + "/"


async def login_required_handler(request: Request, exc: Exception) -> Response:
    """Redirect a browser to the login page; answer 401 to anything else."""
    assert isinstance(exc, LoginRequired)
    response: Response
    if _wants_html(request) and request.method == "GET":
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        response = RedirectResponse(f"{UI_PREFIX}/login?{urlencode({'next': target})}", status_code=303)
    else:
        response = Response(
            json.dumps({"error": "login required: open /ui/login or send 'Authorization: Bearer <key>'"}),
            status_code=401,
            media_type="application/json",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if exc.clear_cookie:
        codec(request).clear_cookie(response, request)
    return response


async def forbidden_handler(request: Request, exc: Exception) -> Response:
    """The error page of a refused action."""
    assert isinstance(exc, UiForbidden)
    viewer: Viewer | None = None
    scope = getattr(request.state, "key_scope", None)
    if scope is not None:
        session = codec(request).read(request)
        viewer = Viewer(scope=scope, csrf=session.csrf if session else "", via_cookie=session is not None)
    return render(request, "error.html", {"message": exc.message}, status_code=exc.status_code, viewer=viewer)


router = APIRouter(prefix=UI_PREFIX, include_in_schema=False)


# ---- Login ---------------------------------------------------------------------------------------------


def _login_page(request: Request, *, error: str | None = None, next_path: str = "", status_code: int = 200) -> Response:
    token = secrets.token_urlsafe(24)
    response = render(
        request,
        "login.html",
        {"error": error, "next": _safe_next(next_path), "login_csrf": token},
        status_code=status_code,
    )
    codec(request).set_login_cookie(response, request, token)
    return response


@router.get("/login")
def login_form(request: Request, next: str = "") -> Response:  # noqa: A002 - the query parameter's name
    """The login page: an API key field."""
    return _login_page(request, next_path=next)


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the key; on success set the session cookie and go where the user was headed."""
    form = await read_form(request)
    next_path = _safe_next(form.get("next"))
    expected = request.cookies.get(LOGIN_COOKIE_NAME, "")
    if not expected or not hmac.compare_digest(form.get("csrf", "").encode(), expected.encode()):
        return _login_page(request, error="The login form expired: try again.", next_path=next_path, status_code=403)
    key = form.get("api_key", "").strip()
    if not key:
        return _login_page(request, error="Enter an API key.", next_path=next_path, status_code=401)
    try:
        await get_state(request).keys.resolve(key)
    except ApiError as error:
        return _login_page(request, error=f"Login refused: {error.error}", next_path=next_path, status_code=401)
    _, cookie = codec(request).new_session(key)
    response = RedirectResponse(next_path, status_code=303)
    codec(request).set_cookie(response, request, cookie)
    response.delete_cookie(LOGIN_COOKIE_NAME, path=COOKIE_PATH)
    return response


@router.post("/logout")
async def logout(request: Request, viewer: CurrentViewer) -> Response:
    """End the session on the server (every copy of its cookie stops working) and drop the cookie."""
    await checked_form(request, viewer)
    response: Response
    try:
        if viewer.session_id:
            await ended_sessions(request).end(viewer.session_id)
        response = RedirectResponse(f"{UI_PREFIX}/login", status_code=303)
    except SessionStoreUnavailable as error:
        # The browser's cookie goes anyway; say plainly that a copy of it could come back to life
        # (it is refused meanwhile, since no request can check the record either).
        message = (
            f"The logout could not be recorded ({error}): this browser's cookie was removed, "
            "but log out again once the service answers to end copies of it."
        )
        response = render(request, "error.html", {"message": message}, status_code=503)
    codec(request).clear_cookie(response, request)
    return response


# ---- Agents --------------------------------------------------------------------------------------------


def narrowed_prefix(scope_prefix: str | None, find: str) -> str | None:
    """The id prefix to list: the key's and the one searched for, whichever is narrower.

    ``""`` (an empty string) when they exclude each other: nothing matches.
    """
    if not find:
        return scope_prefix
    if scope_prefix is None or find.startswith(scope_prefix):
        return find
    return scope_prefix if scope_prefix.startswith(find) else ""


@router.get("/")
async def agents_page(request: Request, viewer: CurrentViewer, after: str = "", find: str = "") -> Response:
    """The agents the key covers, with capped counts and last activity; ``find`` keeps the ids starting so."""
    scope = viewer.scope
    find = find.strip()[:128]
    agent_ids = None if scope.operator or scope.agent_ids is None else sorted(scope.agent_ids)
    prefix = narrowed_prefix(None if scope.operator else scope.agent_prefix, find)
    if agent_ids is not None:
        agent_ids = [agent_id for agent_id in agent_ids if agent_id.startswith(find)]
        prefix = None
    elif not scope.operator and scope.agent_prefix is None:
        agent_ids = []
    elif prefix == "":
        agent_ids = []
        prefix = None

    def read() -> Any:
        with get_state(request).sessions() as session:
            return list_agents(session, agent_ids=agent_ids, prefix=prefix, after=after or None, limit=PAGE_SIZE)

    page = await run_in_threadpool(read)
    return render(request, "agents.html", {"page": page, "after": after, "find": find}, viewer=viewer)


@dataclass(frozen=True)
class OverrideRow:
    """One field the agent overrides: its value, the value its work runs on, the service's."""

    field: str
    override: str
    effective: str
    service: str


@dataclass(frozen=True)
class ConfigPanel:
    """The agent's memory configuration as the overview shows it (read-only)."""

    rows: list[OverrideRow]
    updated_at: datetime | None
    # The service config changed since the overrides were put and refuses them: the agent's
    # work runs on the service config (memory_core.agent_config.ConfigResolver).
    refused: str | None


def _config_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def config_panel(base: MemoryConfig, stored: StoredAgentConfig | None) -> ConfigPanel:
    """The agent's stored overrides beside the effective and the service values."""
    if stored is None or not stored.overrides:
        return ConfigPanel(rows=[], updated_at=stored.updated_at if stored else None, refused=None)
    refused = None
    try:
        effective = check_agent_overrides(base, stored.overrides).effective()
    except ConfigOverrideError as error:
        refused = str(error)
        effective = base.effective()
    service = base.effective()
    rows = [
        OverrideRow(field, _config_value(value), _config_value(effective.get(field)), _config_value(service.get(field)))
        for field, value in sorted(stored.overrides.items())
    ]
    return ConfigPanel(rows=rows, updated_at=stored.updated_at, refused=refused)


@router.get("/agents/{agent_id}")
def agent_page(request: Request, viewer: CurrentViewer, agent_id: AgentId, facts_before: str = "") -> Response:
    """An agent: its entities, recent facts and recent events."""
    _needs(viewer, agent_id, "read")
    state = get_state(request)
    with state.sessions() as session:
        entities = list_entity_rows(session, agent_id, limit=30)
        facts = recent_facts(session, agent_id, before=Cursor.decode(facts_before), limit=PAGE_SIZE)
        events = list_agent_events(session, agent_id, limit=10)
        stored = read_agent_config(session, agent_id)
    context = {
        "agent_id": agent_id,
        "config": config_panel(state.settings.memory, stored),
        "entities": entities.items,
        "more_entities": entities.next_cursor is not None,
        "facts": facts.items,
        "next_facts": facts.next_cursor,
        "facts_before": facts_before,
        "events": events.items,
        "client_error": client_error,
    }
    return render(request, "agent.html", context, viewer=viewer)


@router.get("/agents/{agent_id}/entities")
def entities_page(
    request: Request,
    viewer: CurrentViewer,
    agent_id: AgentId,
    *,
    q: str = "",
    type: str = "",  # noqa: A002 - the query parameter's name
    order: str = "recent",
    after: str = "",
) -> Response:
    """An agent's entities: search by name or key, filter by type, order by recency, importance or name (keyset)."""
    _needs(viewer, agent_id, "read")
    chosen: EntityOrder = order if order in ("recent", "importance", "name") else "recent"  # type: ignore[assignment]
    with get_state(request).sessions() as session:
        page = list_entity_rows(
            session,
            agent_id,
            search=q.strip()[:200] or None,
            entity_type=type.strip()[:64] or None,
            order=chosen,
            limit=PAGE_SIZE,
            after=after[:2048] or None,
        )
        types = entity_types(session, agent_id)
    base = {"q": q, "type": type, "order": chosen}
    context = {
        "agent_id": agent_id,
        "rows": page.items,
        "types": types,
        "filters": base,
        "next_query": urlencode({**base, "after": page.next_cursor}) if page.next_cursor else None,
        # Keyset pages go forward; the way back is the first page (or the browser's back button).
        "first_query": urlencode(base) if after else None,
    }
    return render(request, "entities.html", context, viewer=viewer)


def _query(**values: str | None) -> str:
    """A query string of the non-empty ``values``."""
    return urlencode({name: value for name, value in values.items() if value})


def _parse_as_of(raw: str) -> datetime | None:
    if not raw.strip():
        return None
    try:
        value = datetime.fromisoformat(raw.strip())
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@router.get("/agents/{agent_id}/entities/{entity_key:path}")
def entity_page(
    request: Request,
    viewer: CurrentViewer,
    agent_id: AgentId,
    entity_key: str,
    *,
    as_of: str = "",
    active_before: str = "",
    past_before: str = "",
) -> Response:
    """One entity: profile, aliases, graph, the facts valid now (or at ``as_of``) with their history, past facts.

    Both fact lists page by keyset (``active_before``, ``past_before``): each page reads one page
    of the entity's facts through the links' time indexes, however many facts the entity has.
    """
    _needs(viewer, agent_id, "read")
    when = _parse_as_of(as_of)
    with get_state(request).sessions() as session:
        entity = get_entity(session, agent_id, entity_key[:256])
        if entity is None:
            raise UiForbidden(f"agent {agent_id!r} has no entity {entity_key!r}", 404)
        key = entity.canonical_key
        active = entity_facts(
            session, agent_id, key, as_of=when, before=Cursor.decode(active_before), limit=ACTIVE_FACTS_PAGE
        )
        past = entity_facts(session, agent_id, key, which="past", before=Cursor.decode(past_before), limit=PAGE_SIZE)
        histories = fact_histories(session, agent_id, [fact.fact_id for fact in active.items])
        graph = radial_layout(key, entity.display_name, neighbours(session, agent_id, key))
    now = datetime.now(UTC)
    start = entity.first_seen_at
    context = {
        "agent_id": agent_id,
        "entity": entity,
        "active": active.items,
        "past": past.items,
        # Each pager keeps the other list where it is, and the instant shown.
        "active_next": (
            _query(as_of=as_of, active_before=active.next_cursor, past_before=past_before)
            if active.next_cursor
            else None
        ),
        "active_first": _query(as_of=as_of, past_before=past_before) if active_before else None,
        "past_next": (
            _query(as_of=as_of, active_before=active_before, past_before=past.next_cursor) if past.next_cursor else None
        ),
        "past_first": _query(as_of=as_of, active_before=active_before) if past_before else None,
        "histories": histories,
        "graph": graph,
        "as_of": when,
        "as_of_raw": as_of,
        "slider_min": int(start.timestamp()),
        "slider_max": int(now.timestamp()),
        "slider_value": int((when or now).timestamp()),
        "can_delete": viewer.scope.allows("write"),
    }
    return render(request, "entity.html", context, viewer=viewer)


@router.post("/agents/{agent_id}/facts/{fact_id}/delete")
async def delete_fact_action(
    request: Request, viewer: CurrentViewer, agent_id: AgentId, fact_id: uuid.UUID
) -> Response:
    """Delete one fact (asks for confirmation in the page; needs ``write``)."""
    _needs(viewer, agent_id, "write")
    form = await checked_form(request, viewer)

    def write() -> bool:
        with get_state(request).sessions.begin() as session:
            return delete_fact(session, agent_id, str(fact_id))

    if not await run_in_threadpool(write):
        raise UiForbidden(f"fact {fact_id} not found", 404)
    return RedirectResponse(_safe_next(form.get("next")), status_code=303)


# ---- Retrieval -----------------------------------------------------------------------------------------


@router.get("/agents/{agent_id}/retrieve")
def retrieve_page(request: Request, viewer: CurrentViewer, agent_id: AgentId, q: str = "", as_of: str = "") -> Response:
    """The retrieve playground: a query's context, its facts with every signal's score, and the trace."""
    _needs(viewer, agent_id, "read")
    result = None
    error = None
    query = q.strip()[:MAX_QUERY_CHARS]
    if query:
        from memory_core.providers.errors import ProviderError
        from memory_core.read.pipeline import RetrievalRequestError, retrieve

        try:
            result = retrieve(
                get_state(request).read_context(),
                agent_id=agent_id,
                query=query,
                as_of=_parse_as_of(as_of),
                verbose=True,
            )
        except (RetrievalRequestError, ProviderError) as failure:
            error = f"{type(failure).__name__}: {failure}"
    context = {"agent_id": agent_id, "query": q, "as_of_raw": as_of, "result": result, "error": error}
    return render(request, "retrieve.html", context, viewer=viewer)


# ---- Events, imports, jobs -----------------------------------------------------------------------------


@router.get("/agents/{agent_id}/events")
def events_page(
    request: Request,
    viewer: CurrentViewer,
    agent_id: AgentId,
    *,
    status: str = "all",
    before: str = "",
    notice: str = "",
    limit: int = PAGE_SIZE,
) -> Response:
    """An agent's messages and their processing; failed ones with their error and a re-drive button."""
    _needs(viewer, agent_id, "read")
    chosen: EventFilter = status if status in ("all", "failed", "pending") else "all"  # type: ignore[assignment]
    with get_state(request).sessions() as session:
        page = list_agent_events(
            session, agent_id, status=chosen, before=Cursor.decode(before), limit=min(max(limit, 1), MAX_PAGE_SIZE)
        )
    notices = {"redriven": "The event was queued again."}
    context = {
        "agent_id": agent_id,
        "page": page,
        "status": chosen,
        "limit": limit,
        "client_error": client_error,
        "can_redrive": viewer.scope.allows("admin"),
        "notice": notices.get(notice),
        "live": any(event.status not in ("done", "failed", "skipped") for event in page.items),
    }
    return render(request, "events.html", context, viewer=viewer)


@router.post("/agents/{agent_id}/events/{event_id}/redrive")
async def redrive_action(request: Request, viewer: CurrentViewer, agent_id: AgentId, event_id: uuid.UUID) -> Response:
    """Run a failed event's pipeline again from the stage that failed (needs ``admin``)."""
    _needs(viewer, agent_id, "admin")
    await checked_form(request, viewer)
    state = get_state(request)

    def write() -> str | None:
        with state.sessions.begin() as session:
            if event_agent(session, str(event_id)) != agent_id:
                raise UiForbidden(f"event {event_id} not found", 404)
            return redrive(session, event_id, from_scratch=False)

    start = await run_in_threadpool(write)
    if start is None:
        raise UiForbidden(f"event {event_id} is not failed: only a failed event is re-driven", 409)
    await run_in_threadpool(state.enqueue, (str(event_id),), start)
    assert start in STAGE_INPUT_STATUS
    return RedirectResponse(f"{UI_PREFIX}/agents/{agent_id}/events?notice=redriven", status_code=303)


@router.get("/agents/{agent_id}/imports")
def imports_page(request: Request, viewer: CurrentViewer, agent_id: AgentId, before: str = "") -> Response:
    """An agent's imports with their progress (the page refreshes itself while one runs)."""
    _needs(viewer, agent_id, "read")
    with get_state(request).sessions() as session:
        page = list_agent_imports(session, agent_id, before=Cursor.decode(before), limit=PAGE_SIZE)
    context = {"agent_id": agent_id, "page": page, "live": any(item.status == "running" for item in page.items)}
    return render(request, "imports.html", context, viewer=viewer)


@router.get("/agents/{agent_id}/jobs")
def jobs_page(request: Request, viewer: CurrentViewer, agent_id: AgentId, job: str = "", notice: str = "") -> Response:
    """An agent's recent maintenance runs with their results; admins may run a job now."""
    _needs(viewer, agent_id, "read")
    chosen = job if job in JOB_NAMES else None
    with get_state(request).sessions() as session:
        runs = list_runs(session, agent_id, limit=50, job=chosen)
    context = {
        "agent_id": agent_id,
        "runs": runs,
        "job": chosen or "",
        "jobs": JOB_NAMES,
        "client_error": client_error,
        "can_run": viewer.scope.allows("admin"),
        "notice": {"queued": "The job was queued.", "busy": "That job is already queued or running."}.get(notice),
        "live": any(run.status in ("queued", "running") for run in runs),
    }
    return render(request, "jobs.html", context, viewer=viewer)


@router.post("/agents/{agent_id}/jobs/{job}")
async def run_job_action(request: Request, viewer: CurrentViewer, agent_id: AgentId, job: str) -> Response:
    """Queue a maintenance job for the agent now (needs ``admin``), under the same guard as the API's."""
    _needs(viewer, agent_id, "admin")
    await checked_form(request, viewer)
    if job not in JOB_NAMES:
        raise UiForbidden(f"unknown job {job[:64]!r}", 404)
    state = get_state(request)

    def queue() -> str:
        with state.sessions.begin() as session:
            release_stale_guards(session, state.settings, job, agent_id)
            requested = request_run(session, agent_id, job, "api")
        if not requested.created:
            return "busy"
        try:
            send_job_run(state.celery, job, requested.run_id, state.settings.maintenance_task_expires_s)
        except Exception as error:
            with state.sessions.begin() as session:
                skip_queued_run(session, requested.run_id, f"could not be sent to the broker: {type(error).__name__}")
            raise UiForbidden("the broker is unavailable: the job was not queued; try again", 503) from None
        return "queued"

    notice = await run_in_threadpool(queue)
    return RedirectResponse(f"{UI_PREFIX}/agents/{agent_id}/jobs?notice={notice}", status_code=303)
