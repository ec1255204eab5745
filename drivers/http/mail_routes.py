"""Route handlers of the mailbox: the keys that hold queued messages, a page at a time, and
dropping a key's messages (a mixin of `Api`)."""

from __future__ import annotations

from functools import partial

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from tarry.drivers.http.bodies import int_param, json_response, read_body, text_param
from tarry.drivers.runtime import Runtime
from tarry.engine.keys import MAX_KEY

#: The most keys one `GET /api/mail` returns.
MAX_MAIL_PAGE = 1000


class MailRoutes:
    """The handlers of `/api/mail`, over `self.rt`."""

    rt: Runtime

    async def list_mail(self, request: Request) -> Response:
        """By key, paged by key: `next_after` is the last key of a page that has more after
        it (pass it as `?after=`), null on the last page. The Runtime's `mailbox` has no
        cursor, so this reads the store's, which does."""
        limit = int_param(request, "limit", 100, 1, MAX_MAIL_PAGE)
        prefix = text_param(request, "prefix", MAX_KEY)
        after = text_param(request, "after", MAX_KEY)
        # One more than asked for tells whether there are more: the store reads that page only.
        found = list(
            await run_in_threadpool(
                partial(self.rt.store.mailbox, prefix=prefix, after=after, limit=limit + 1)
            )
        )
        more = len(found) > limit
        del found[limit:]
        return json_response({"mail": found, "next_after": found[-1].key if more else None})

    async def discard_mail(self, request: Request) -> Response:
        """Drop the key's queued messages (not one a Wait has claimed); how many. A bad key
        (empty, too long, with NUL) is 400 InvalidArgument."""
        await read_body(request, set())
        key = request.path_params["key"]
        return json_response({"discarded": await run_in_threadpool(self.rt.discard, key)})
