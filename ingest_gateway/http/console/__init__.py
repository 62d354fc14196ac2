"""The broker's built-in web console at /ui (docs/operations.md, "Console")."""

from ingest_gateway.http.console.views import console_routes

__all__ = ["console_routes"]
