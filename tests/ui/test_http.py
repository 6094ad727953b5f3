"""The explorer over plain HTTP: login, sessions, CSRF, scopes, escaping, pagination."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from api.ui.session import EndedSessions
from tests.support.api_server import TEST_API_KEY, auth_headers
from tests.ui.conftest import XSS_PAYLOAD, UiStack
from workers.redis_client import async_redis_client_for

HTML = {"Accept": "text/html"}


@contextmanager
def login(base_url: str, key: str = TEST_API_KEY) -> Iterator[httpx.Client]:
    """A client holding a session cookie for ``key``."""
    with httpx.Client(base_url=base_url, timeout=30) as client:
        token = csrf_of(client.get("/ui/login", headers=HTML).text)
        answer = client.post("/ui/login", data={"api_key": key, "csrf": token, "next": "/ui/"})
        assert answer.status_code == 303, answer.text
        assert answer.headers["location"] == "/ui/"
        yield client


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match is not None
    return match.group(1)


def test_without_a_session_only_the_login_page_is_served(ui_stack: UiStack) -> None:
    with httpx.Client(base_url=ui_stack.base_url, timeout=30) as client:
        page = client.get(f"/ui/agents/{ui_stack.agent_id}", headers=HTML)
        assert page.status_code == 303
        assert page.headers["location"].startswith("/ui/login?next=")
        assert client.get("/ui/", headers={"Accept": "application/json"}).status_code == 401
        assert client.get(f"/ui/agents/{ui_stack.agent_id}/events").status_code == 401
        login_page = client.get("/ui/login")
        assert login_page.status_code == 200
        assert "API key" in login_page.text
        assert "script-src 'self'" in login_page.headers["content-security-policy"]
    with httpx.Client(base_url=ui_stack.base_url, timeout=30, cookies={"arandu_ui": "not-a-session"}) as forged:
        assert forged.get("/ui/", headers=HTML).status_code == 303


def test_wrong_key_shows_an_error_and_sets_no_session(ui_stack: UiStack) -> None:
    with httpx.Client(base_url=ui_stack.base_url, timeout=30) as client:
        token = csrf_of(client.get("/ui/login").text)
        answer = client.post("/ui/login", data={"api_key": "wrong-key", "csrf": token, "next": "/ui/"})
        assert answer.status_code == 401
        assert "Login refused: invalid API key" in answer.text
        assert "arandu_ui" not in client.cookies
        # The login form's own token: a login posted from elsewhere is refused.
        stale = httpx.post(f"{ui_stack.base_url}/ui/login", data={"api_key": TEST_API_KEY, "csrf": "x"})
        assert stale.status_code == 403


def test_session_cookie_is_http_only_and_strict(ui_stack: UiStack) -> None:
    with httpx.Client(base_url=ui_stack.base_url, timeout=30) as client:
        token = csrf_of(client.get("/ui/login").text)
        answer = client.post("/ui/login", data={"api_key": TEST_API_KEY, "csrf": token, "next": "//evil.example/"})
        assert answer.headers["location"] == "/ui/"  # never another host
        cookie = next(value for value in answer.headers.get_list("set-cookie") if value.startswith("arandu_ui="))
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
        assert "Path=/ui" in cookie
        assert TEST_API_KEY not in cookie  # encrypted, not the raw key


def test_bearer_header_works_for_scripts(ui_stack: UiStack) -> None:
    page = httpx.get(f"{ui_stack.base_url}/ui/", params={"find": ui_stack.agent_id}, headers=auth_headers(), timeout=30)
    assert page.status_code == 200
    assert ui_stack.agent_id in page.text
    elsewhere = httpx.get(
        f"{ui_stack.base_url}/ui/", params={"find": "no-such-agent-"}, headers=auth_headers(), timeout=30
    )
    assert ui_stack.agent_id not in elsewhere.text
    assert httpx.get(f"{ui_stack.base_url}/ui/", headers=auth_headers("nope"), timeout=30).status_code == 401


def test_pages_escape_stored_text(ui_stack: UiStack) -> None:
    with login(ui_stack.base_url) as client:
        page = client.get(f"/ui/agents/{ui_stack.agent_id}/events")
        assert page.status_code == 200
        assert "<script>window.__xss" not in page.text
        assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in page.text
        assert XSS_PAYLOAD not in page.text


def test_csrf_token_is_required_on_every_post(ui_stack: UiStack) -> None:
    with login(ui_stack.base_url) as client:
        url = f"/ui/agents/{ui_stack.agent_id}/events/{ui_stack.failed_event_id}/redrive"
        assert client.post(url, data={}).status_code == 403
        assert client.post(url, data={"csrf": "forged"}).status_code == 403
        assert client.post("/ui/logout", data={}).status_code == 403
        # The event was not touched.
        event = httpx.get(f"{ui_stack.base_url}/v1/events/{ui_stack.failed_event_id}", headers=auth_headers())
        assert event.json()["status"] == "failed"


def test_tenant_key_sees_only_its_agents_and_its_permissions(ui_stack: UiStack) -> None:
    other = f"ui-other-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=ui_stack.base_url, headers=auth_headers(), timeout=30) as admin:
        sent = admin.post(f"/v1/agents/{other}/messages", json={"message": "I like tea.", "speaker_name": "Bo"})
        assert sent.status_code == 202
        created = admin.post(
            "/v1/keys",
            json={
                "name": f"ui-tenant-{uuid.uuid4().hex[:6]}",
                "agent_ids": [ui_stack.agent_id],
                "permissions": ["read"],
            },
        )
        assert created.status_code == 201, created.text
        tenant_key = created.json()["key"]
        key_name = created.json()["name"]
        with login(ui_stack.base_url, tenant_key) as client:
            agents = client.get("/ui/")
            assert ui_stack.agent_id in agents.text
            assert other not in agents.text
            assert client.get(f"/ui/agents/{other}").status_code == 403
            assert client.get(f"/ui/agents/{ui_stack.agent_id}").status_code == 200
            events = client.get(f"/ui/agents/{ui_stack.agent_id}/events?status=failed")
            assert "re-drive" not in events.text  # read-only key: no admin button
            redrive = client.post(
                f"/ui/agents/{ui_stack.agent_id}/events/{ui_stack.failed_event_id}/redrive",
                data={"csrf": csrf_of(events.text)},
            )
            assert redrive.status_code == 403
            # Revoking the key ends its session.
            assert admin.delete(f"/v1/keys/{key_name}").status_code in (200, 204)
            ended = False
            for _ in range(60):
                if client.get("/ui/", headers=HTML).status_code == 303:
                    ended = True
                    break
                time.sleep(0.1)
            assert ended, "a revoked key's session kept working"


def test_lists_paginate(ui_stack: UiStack) -> None:
    with login(ui_stack.base_url) as client:
        whole = client.get(f"/ui/agents/{ui_stack.agent_id}/events")
        assert 'rel="next"' not in whole.text  # five events fit on one page
        seen: list[str] = []
        url = f"/ui/agents/{ui_stack.agent_id}/events?limit=2"
        pages = 0
        while url:
            page = client.get(url)
            assert page.status_code == 200
            ids = re.findall(r'data-event-id="([^"]+)"', page.text)
            assert 1 <= len(ids) <= 2
            seen.extend(ids)
            pages += 1
            link = re.search(r'rel="next" href="([^"]+)"', page.text)
            url = f"/ui/agents/{ui_stack.agent_id}/events" + link.group(1).replace("&amp;", "&") if link else ""
        assert pages == 3
        assert len(seen) == len(set(seen)) == 5
        missing = client.get(f"/ui/agents/{ui_stack.agent_id}/events?before=2000-01-01T00:00:00%2B00:00~{uuid.uuid4()}")
        assert '<tr class="event' not in missing.text
        entities = client.get(f"/ui/agents/{ui_stack.agent_id}/entities?offset=0")
        assert "person:ana" in entities.text
        searched = client.get(f"/ui/agents/{ui_stack.agent_id}/entities?q=porto")
        assert "place:porto" in searched.text
        assert "person:ana" not in searched.text


def test_the_agent_search_never_widens_a_keys_scope() -> None:
    from api.ui.routes import narrowed_prefix

    assert narrowed_prefix(None, "") is None
    assert narrowed_prefix(None, "acme:a") == "acme:a"
    assert narrowed_prefix("acme:", "acme:ana") == "acme:ana"
    assert narrowed_prefix("acme:", "ac") == "acme:"
    assert narrowed_prefix("acme:", "globex:") == ""


def test_logout_ends_every_copy_of_the_session(ui_stack: UiStack) -> None:
    with login(ui_stack.base_url) as client:
        copy = client.cookies["arandu_ui"]
        page = client.get("/ui/", headers=HTML)
        assert page.status_code == 200
        out = client.post("/ui/logout", data={"csrf": csrf_of(page.text)})
        assert out.status_code == 303
        assert out.headers["location"] == "/ui/login"
    # A copy of the cookie taken before the logout (another tab, a stolen copy) is refused too.
    with httpx.Client(base_url=ui_stack.base_url, timeout=30, cookies={"arandu_ui": copy}) as replay:
        again = replay.get("/ui/", headers=HTML)
        assert again.status_code == 303
        assert again.headers["location"].startswith("/ui/login")
        assert replay.get(f"/ui/agents/{ui_stack.agent_id}/events").status_code == 401
    # Another session of the same key is not affected.
    with login(ui_stack.base_url) as other:
        assert other.get("/ui/", headers=HTML).status_code == 200


def test_sessions_fail_closed_when_the_logout_record_cannot_be_read(ui_stack: UiStack) -> None:
    state = ui_stack.app.state
    working = state.ui_ended_sessions
    with login(ui_stack.base_url) as client:
        page = client.get("/ui/", headers=HTML)
        # Nothing listens on port 1: every check of the record fails.
        state.ui_ended_sessions = EndedSessions(
            async_redis_client_for("redis://127.0.0.1:1/0", socket_timeout_s=0.5), "", working.ttl_s
        )
        try:
            refused = client.get(f"/ui/agents/{ui_stack.agent_id}", headers=HTML)
            assert refused.status_code == 503
            assert "cannot check that this session was not logged out" in refused.text
            assert client.post("/ui/logout", data={"csrf": csrf_of(page.text)}).status_code == 503
            # Scripts with a Bearer header do not depend on it.
            assert client.get("/ui/", headers={**HTML, **auth_headers()}).status_code == 200
        finally:
            state.ui_ended_sessions = working
        # Once the record answers again the session is usable (it was never logged out).
        assert client.get("/ui/", headers=HTML).status_code == 200


def _read_only_key(admin: httpx.Client, agent_id: str) -> str:
    created = admin.post(
        "/v1/keys",
        json={"name": f"ui-ro-{uuid.uuid4().hex[:6]}", "agent_ids": [agent_id], "permissions": ["read"]},
    )
    assert created.status_code == 201, created.text
    return str(created.json()["key"])


def test_read_only_key_cannot_delete_facts_nor_run_jobs(ui_stack: UiStack) -> None:
    agent = ui_stack.agent_id
    with httpx.Client(base_url=ui_stack.base_url, headers=auth_headers(), timeout=30) as admin:
        facts = admin.get(f"/v1/agents/{agent}/facts").json()["facts"]
        fact_id = next(fact["fact_id"] for fact in facts if "Porto" in fact["fact_text"])
        with login(ui_stack.base_url, _read_only_key(admin, agent)) as client:
            entity = client.get(f"/ui/agents/{agent}/entities/person%3Aana")
            assert entity.status_code == 200
            assert "Ana moved to Porto." in entity.text
            assert "/delete" not in entity.text  # no delete button
            refused = client.post(f"/ui/agents/{agent}/facts/{fact_id}/delete", data={"csrf": csrf_of(entity.text)})
            assert refused.status_code == 403
            assert "lacks the &#39;write&#39; permission" in refused.text
            jobs = client.get(f"/ui/agents/{agent}/jobs")
            assert jobs.status_code == 200
            assert "run importance" not in jobs.text  # no run buttons
            ran = client.post(f"/ui/agents/{agent}/jobs/importance", data={"csrf": csrf_of(entity.text)})
            assert ran.status_code == 403
        # The fact is still there.
        assert admin.get(f"/v1/agents/{agent}/facts/{fact_id}").status_code == 200


def test_the_agent_page_says_when_the_service_refuses_stored_overrides(ui_stack: UiStack) -> None:
    from sqlalchemy.orm import Session

    from memory_core.agent_config import store_agent_config
    from memory_core.db.engine import create_db_engine

    agent = f"ui-refused-{uuid.uuid4().hex[:8]}"
    # Stored as if put under an older service config that allowed them (the API checks each PUT).
    engine = create_db_engine(ui_stack.settings, pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            store_agent_config(session, agent, {"topk_facts": 100_000, "timezone": "<b>Mars</b>"})
    finally:
        engine.dispose()

    page = httpx.get(f"{ui_stack.base_url}/ui/agents/{agent}", headers=auth_headers(), timeout=30)
    assert page.status_code == 200
    assert 'id="config-refused"' in page.text
    assert "topk_facts" in page.text
    row = re.search(r"<tr><td class=\"mono\">topk_facts</td>(.*?)</tr>", page.text)
    assert row is not None
    # The override, then what the agent's work runs on: the service's value.
    cells = re.findall(r"<td class=\"mono\">([^<]*)</td>", row.group(1))
    assert cells == ["100000", str(ui_stack.settings.memory.topk_facts), str(ui_stack.settings.memory.topk_facts)]
    assert "<b>Mars</b>" not in page.text
    assert "&lt;b&gt;Mars&lt;/b&gt;" in page.text
