"""The HTTP front end: the JSON API, server-sent event streams and the live monitor page.

`create_app(runtime)` builds the Starlette (ASGI) app and `serve(runtime)` runs it with uvicorn
(`tarry serve`); both need the `server` extra. Importing `tarry` never imports this package.
"""

from tarry.drivers.http.app import create_app, serve

__all__ = ["create_app", "serve"]
