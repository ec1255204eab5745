"""The OpenAPI 3.1 description of the HTTP API, served at `GET /api/openapi.json`."""

from __future__ import annotations

from typing import Any


def document() -> dict[str, Any]:
    return {"openapi": "3.1.0", "info": {"title": "tarry", "version": "1"}, "paths": {}}
