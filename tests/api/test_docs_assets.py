"""``/docs`` and ``/redoc`` work without internet: every asset they reference comes from the API itself."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.support.processes import running_api, service_env
from tests.support.services import TestServices, free_port

# What a browser would fetch: script/link/img sources and the OpenAPI document the page loads.
_REFERENCES = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|\burl:\s*['"]([^'"]+)['"]|spec-url=["']([^"']+)["']""")


def _references(page: str) -> list[str]:
    return sorted({next(group for group in match.groups() if group) for match in _REFERENCES.finditer(page)})


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_page_and_every_asset_it_references_come_from_the_service(
    page: str, migrated_database_url: str, services: TestServices, tmp_path: Path
) -> None:
    port = free_port()
    env = service_env(database_url=migrated_database_url, broker_url=services.broker_url, api_port=port, home=tmp_path)
    with running_api(env, port) as base_url:
        html = httpx.get(f"{base_url}{page}")
        assert html.status_code == 200
        references = _references(html.text)
        # The JavaScript, the stylesheet (Swagger UI only), the favicon and the OpenAPI document.
        assert any(ref.endswith(".js") for ref in references), references
        assert "/openapi.json" in references
        if page == "/docs":
            assert any(ref.endswith(".css") for ref in references), references
        # None from elsewhere: no scheme, no protocol-relative host (a CDN would be one of those).
        assert [ref for ref in references if "//" in ref] == []
        for ref in references:
            asset = httpx.get(f"{base_url}{ref}")
            assert asset.status_code == 200, ref
            assert len(asset.content) > 1000, ref
