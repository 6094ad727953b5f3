"""The OpenAPI pages (``/docs``, ``/docs/oauth2-redirect``, ``/redoc``) with their assets served by the API itself.

FastAPI's default pages load Swagger UI and ReDoc from a CDN, which leaves ``/docs`` blank on a
machine without internet. This follows FastAPI's documented self-hosting of the docs assets:
the JavaScript, CSS and favicon come from the ``fastapi-offline`` wheel (a package that ships
them, so nothing is fetched at run time or copied into this repository) and are mounted under
:data:`ASSETS_PATH`.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_PATH = "/docs-assets"
ASSETS_DIR = Path(fastapi_offline.__file__).parent / "static"
_REQUIRED = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")


def install_docs(app: FastAPI, *, openapi_url: str = "/openapi.json") -> None:
    """Serve ``/docs`` and ``/redoc`` from local assets (create ``app`` with ``docs_url=None, redoc_url=None``)."""
    missing = [name for name in _REQUIRED if not (ASSETS_DIR / name).is_file()]
    if missing:
        # A broken install should fail at start with the reason, not serve a blank page later.
        raise RuntimeError(f"the docs assets are missing from {ASSETS_DIR}: {', '.join(missing)}")
    app.mount(ASSETS_PATH, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
    title = app.title
    oauth2_redirect = "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{title} - Swagger UI",
            oauth2_redirect_url=oauth2_redirect,
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
        )

    @app.get(oauth2_redirect, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{title} - ReDoc",
            redoc_js_url=f"{ASSETS_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_PATH}/favicon.png",
            with_google_fonts=False,
        )
