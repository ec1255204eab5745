"""A fake provider batch API for tests: a real HTTP server on 127.0.0.1 that answers the calls the
official `openai` SDK makes for Files and Batches and the `anthropic` SDK makes for Message
Batches, with the shapes of the SDKs' own types (tests/batches/test_fake_server.py checks them).

It never ends a batch on its own unless `auto_complete` is set: a test ends one with `complete`,
`expire` or `cancel`, so nothing depends on time. It counts submissions per `custom_id`
(`submitted`), can fail chosen items (`fail`), and can drop the connection of the next requests
to a path (`drop`). Use it as a context manager:

    with FakeProvider() as fake:
        client = openai.OpenAI(base_url=fake.openai_url, api_key="test", max_retries=0)
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


def echo_openai(body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion that answers with the last message's content, reversed."""
    messages = body.get("messages") or [{"content": ""}]
    text = str(messages[-1].get("content", ""))
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text[::-1]},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": len(text), "completion_tokens": len(text), "total_tokens": 0},
    }


def echo_anthropic(params: dict[str, Any]) -> dict[str, Any]:
    """A message that answers with the last message's content, reversed."""
    messages = params.get("messages") or [{"content": ""}]
    text = str(messages[-1].get("content", ""))
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": params.get("model", "fake"),
        "content": [{"type": "text", "text": text[::-1]}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": len(text), "output_tokens": len(text)},
    }


class FakeProvider:
    """The fake's state and controls; `start()` serves it (also as a context manager)."""

    def __init__(
        self,
        *,
        auto_complete: bool = False,
        openai_responder: Callable[[dict[str, Any]], dict[str, Any]] = echo_openai,
        anthropic_responder: Callable[[dict[str, Any]], dict[str, Any]] = echo_anthropic,
    ) -> None:
        #: End every batch (all its items answered) as soon as it is created.
        self.auto_complete = auto_complete
        self.openai_responder = openai_responder
        self.anthropic_responder = anthropic_responder
        self.lock = threading.RLock()
        self.ids = itertools.count(1)
        #: file id -> {"meta": FileObject, "content": bytes}
        self.files: dict[str, dict[str, Any]] = {}
        #: batch id -> {"kind": "openai"|"anthropic", "obj": dict, "requests": [(custom_id, body)]}
        self.batches: dict[str, dict[str, Any]] = {}
        #: How many times each custom_id was submitted in a batch (both providers).
        self.submitted: Counter[str] = Counter()
        #: custom_id -> error message: the item fails when its batch completes.
        self.failures: dict[str, str] = {}
        #: path prefix -> how many more requests to it lose their connection (no answer).
        self.drops: dict[str, int] = {}
        #: Every request served, as (method, path).
        self.calls: list[tuple[str, str]] = []
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None
        self.url = ""

    # -- controls ----------------------------------------------------------------------------
    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_url(self) -> str:
        return self.url

    def fail(self, custom_id: str, message: str = "invalid request") -> None:
        self.failures[custom_id] = message

    def drop(self, path_prefix: str, times: int = 1) -> None:
        """The next `times` requests whose path starts with `path_prefix` get no answer: the
        connection is closed after the request was read (and, for a create, acted on)."""
        self.drops[path_prefix] = times

    def count(self, method: str, prefix: str) -> int:
        return sum(1 for m, p in self.calls if m == method and p.startswith(prefix))

    def complete(self, batch_id: str | None = None) -> None:
        """End one batch (or every open one) with every item answered."""
        with self.lock:
            for bid in [batch_id] if batch_id else list(self.batches):
                if not self._ended(bid):
                    self._finish(bid, answered=None, how="completed")

    def expire(self, batch_id: str, answered: int | Collection[str] = 0) -> None:
        """End a batch as expired, with its first `answered` items answered (or those whose
        custom_ids `answered` holds)."""
        with self.lock:
            self._finish(batch_id, answered=answered, how="expired")

    def cancel(self, batch_id: str, answered: int | Collection[str] = 0) -> None:
        with self.lock:
            self._finish(batch_id, answered=answered, how="cancelled")

    def open_batches(self) -> list[str]:
        return [bid for bid in self.batches if not self._ended(bid)]

    # -- serving -----------------------------------------------------------------------------
    def start(self) -> FakeProvider:
        handler = type("Handler", (_Handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- the providers' objects --------------------------------------------------------------
    def _id(self, prefix: str) -> str:
        return f"{prefix}{next(self.ids):06d}"

    def _ended(self, bid: str) -> bool:
        batch = self.batches[bid]
        obj = batch["obj"]
        if batch["kind"] == "openai":
            return obj["status"] in ("completed", "expired", "cancelled", "failed")
        return obj["processing_status"] == "ended"

    def _finish(self, bid: str, *, answered: int | Collection[str] | None, how: str) -> None:
        batch = self.batches[bid]
        requests = batch["requests"]
        if answered is None:
            done, rest = requests, []
        elif isinstance(answered, int):
            done, rest = requests[:answered], requests[answered:]
        else:
            done = [r for r in requests if r[0] in answered]
            rest = [r for r in requests if r[0] not in answered]
        now = int(time.time())
        if batch["kind"] == "openai":
            self._finish_openai(batch, done, rest, how, now)
        else:
            self._finish_anthropic(batch, done, rest, how, now)

    def _finish_openai(
        self, batch: dict[str, Any], done: list[Any], rest: list[Any], how: str, now: int
    ) -> None:
        obj = batch["obj"]
        out: list[str] = []
        errors: list[str] = []
        failed = 0
        for custom_id, request in done:
            line_id = self._id("batch_req_")
            if custom_id in self.failures:
                failed += 1
                errors.append(
                    json.dumps(
                        {
                            "id": line_id,
                            "custom_id": custom_id,
                            "response": {
                                "status_code": 400,
                                "request_id": line_id,
                                "body": {
                                    "error": {
                                        "message": self.failures[custom_id],
                                        "type": "invalid_request_error",
                                        "code": "invalid_value",
                                    }
                                },
                            },
                            "error": None,
                        }
                    )
                )
                continue
            body = self.openai_responder(request["body"])
            out.append(
                json.dumps(
                    {
                        "id": line_id,
                        "custom_id": custom_id,
                        "response": {"status_code": 200, "request_id": line_id, "body": body},
                        "error": None,
                    }
                )
            )
        for custom_id, _ in rest:
            code = "batch_expired" if how == "expired" else "batch_cancelled"
            errors.append(
                json.dumps(
                    {
                        "id": self._id("batch_req_"),
                        "custom_id": custom_id,
                        "response": None,
                        "error": {"code": code, "message": f"This request was {how}."},
                    }
                )
            )
        if out:
            obj["output_file_id"] = self._file("\n".join(out) + "\n", "batch_output")
        if errors:
            obj["error_file_id"] = self._file("\n".join(errors) + "\n", "batch_output")
        obj["status"] = how
        obj[f"{how}_at"] = now
        obj["request_counts"] = {
            "total": len(done) + len(rest),
            "completed": len(done) - failed,
            "failed": failed + (len(rest) if how != "completed" else 0),
        }

    def _finish_anthropic(
        self, batch: dict[str, Any], done: list[Any], rest: list[Any], how: str, now: int
    ) -> None:
        obj = batch["obj"]
        lines = []
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        for custom_id, request in done:
            if custom_id in self.failures:
                counts["errored"] += 1
                result: dict[str, Any] = {
                    "type": "errored",
                    "error": {
                        "type": "error",
                        "error": {
                            "type": "invalid_request_error",
                            "message": self.failures[custom_id],
                        },
                    },
                }
            else:
                counts["succeeded"] += 1
                message = self.anthropic_responder(request["params"])
                result = {"type": "succeeded", "message": message}
            lines.append({"custom_id": custom_id, "result": result})
        kind = "expired" if how == "expired" else "canceled"
        for custom_id, _ in rest:
            counts[kind] += 1
            lines.append({"custom_id": custom_id, "result": {"type": kind}})
        batch["results"] = "".join(json.dumps(line) + "\n" for line in lines).encode()
        obj["processing_status"] = "ended"
        obj["request_counts"] = counts
        obj["ended_at"] = _iso(now)
        obj["results_url"] = f"{self.url}/v1/messages/batches/{obj['id']}/results"

    def _file(self, content: str, purpose: str, filename: str = "output.jsonl") -> str:
        fid = self._id("file-")
        data = content.encode()
        self.files[fid] = {
            "meta": {
                "id": fid,
                "object": "file",
                "bytes": len(data),
                "created_at": int(time.time()),
                "filename": filename,
                "purpose": purpose,
                "status": "processed",
            },
            "content": data,
        }
        return fid

    # -- the endpoints -----------------------------------------------------------------------
    def upload(self, filename: str, purpose: str, content: bytes) -> dict[str, Any]:
        with self.lock:
            fid = self._file(content.decode(), purpose, filename)
            return self.files[fid]["meta"]

    def create_openai(self, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            file = self.files.get(payload.get("input_file_id", ""))
            if file is None:
                return 404, _error("No such File object")
            requests = []
            for line in file["content"].decode().splitlines():
                if line.strip():
                    item = json.loads(line)
                    requests.append((item["custom_id"], item))
            ids = [custom_id for custom_id, _ in requests]
            if len(set(ids)) != len(ids):
                return 400, _error("custom_id values must be unique within a batch")
            bid = self._id("batch_")
            now = int(time.time())
            obj = {
                "id": bid,
                "object": "batch",
                "endpoint": payload["endpoint"],
                "errors": None,
                "input_file_id": payload["input_file_id"],
                "completion_window": payload["completion_window"],
                "status": "in_progress",
                "output_file_id": None,
                "error_file_id": None,
                "created_at": now,
                "in_progress_at": now,
                "expires_at": now + 86400,
                "finalizing_at": None,
                "completed_at": None,
                "failed_at": None,
                "expired_at": None,
                "cancelling_at": None,
                "cancelled_at": None,
                "request_counts": {"total": len(requests), "completed": 0, "failed": 0},
                "metadata": payload.get("metadata"),
            }
            self.batches[bid] = {"kind": "openai", "obj": obj, "requests": requests}
            self.submitted.update(ids)
            if self.auto_complete:
                self._finish(bid, answered=None, how="completed")
            return 200, obj

    def create_anthropic(self, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            requests = [(r["custom_id"], r) for r in payload.get("requests", [])]
            ids = [custom_id for custom_id, _ in requests]
            if not ids or len(set(ids)) != len(ids):
                return 400, _anthropic_error("custom_id values must be unique and present")
            bid = self._id("msgbatch_")
            now = int(time.time())
            obj = {
                "id": bid,
                "type": "message_batch",
                "processing_status": "in_progress",
                "request_counts": {
                    "processing": len(requests),
                    "succeeded": 0,
                    "errored": 0,
                    "canceled": 0,
                    "expired": 0,
                },
                "ended_at": None,
                "created_at": _iso(now),
                "expires_at": _iso(now + 86400),
                "archived_at": None,
                "cancel_initiated_at": None,
                "results_url": None,
            }
            self.batches[bid] = {"kind": "anthropic", "obj": obj, "requests": requests}
            self.submitted.update(ids)
            if self.auto_complete:
                self._finish(bid, answered=None, how="completed")
            return 200, obj

    def listing(self, kind: str, query: dict[str, list[str]]) -> dict[str, Any]:
        with self.lock:
            # Newest first, as both providers list.
            objs = [b["obj"] for b in reversed(self.batches.values()) if b["kind"] == kind]
            limit = int(query.get("limit", ["20"])[0])
            after = query.get("after" if kind == "openai" else "after_id", [None])[0]
            if after is not None:
                ids = [o["id"] for o in objs]
                objs = objs[ids.index(after) + 1 :] if after in ids else []
            page = objs[:limit]
            more = len(objs) > limit
            out: dict[str, Any] = {
                "data": [dict(o) for o in page],
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
                "has_more": more,
            }
            if kind == "openai":
                out["object"] = "list"
            return out


def _iso(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": None}}


def _anthropic_error(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeProvider
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, payload: Any, *, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        ctype = "application/octet-stream" if raw is not None else "application/json"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dropped(self, path: str) -> bool:
        fake = self.fake
        with fake.lock:
            for prefix, left in fake.drops.items():
                if left > 0 and path.startswith(prefix):
                    fake.drops[prefix] = left - 1
                    return True
        return False

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        path, query = url.path, parse_qs(url.query)
        body = self._body()
        fake = self.fake
        with fake.lock:
            fake.calls.append((method, path))
        drop = self._dropped(path)
        try:
            status, payload, raw = self._route(method, path, query, body)
        except Exception as exc:  # a bug of the fake: show it to the test
            status, payload, raw = 500, _error(f"fake provider: {exc!r}"), None
        if drop:
            # Acted on, never answered: the client sees the connection go.
            self.close_connection = True
            self.connection.close()
            return
        self._send(status, payload, raw=raw)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes
    ) -> tuple[int, Any, bytes | None]:
        fake = self.fake
        parts = [p for p in path.split("/") if p]
        # -- OpenAI: /v1/files, /v1/batches ----------------------------------------------------
        if parts[:2] == ["v1", "files"]:
            if method == "POST" and len(parts) == 2:
                filename, purpose, content = _multipart(self.headers["Content-Type"], body)
                return 200, fake.upload(filename, purpose, content), None
            file = fake.files.get(parts[2]) if len(parts) > 2 else None
            if file is None:
                return 404, _error("No such File object"), None
            if len(parts) == 4 and parts[3] == "content":
                return 200, None, file["content"]
            return 200, file["meta"], None
        if parts[:2] == ["v1", "batches"]:
            if len(parts) == 2:
                if method == "POST":
                    status, obj = fake.create_openai(json.loads(body))
                    return status, obj, None
                return 200, fake.listing("openai", query), None
            batch = fake.batches.get(parts[2])
            if batch is None or batch["kind"] != "openai":
                return 404, _error("No such Batch"), None
            if len(parts) == 4 and parts[3] == "cancel" and method == "POST":
                fake.cancel(parts[2])
            return 200, batch["obj"], None
        # -- Anthropic: /v1/messages/batches ---------------------------------------------------
        if parts[:3] == ["v1", "messages", "batches"]:
            if len(parts) == 3:
                if method == "POST":
                    status, obj = fake.create_anthropic(json.loads(body))
                    return status, obj, None
                return 200, fake.listing("anthropic", query), None
            batch = fake.batches.get(parts[3])
            if batch is None or batch["kind"] != "anthropic":
                return 404, _anthropic_error("No such message batch"), None
            if len(parts) == 5 and parts[4] == "results":
                if "results" not in batch:
                    return 404, _anthropic_error("results are not ready"), None
                return 200, None, batch["results"]
            if len(parts) == 5 and parts[4] == "cancel" and method == "POST":
                fake.cancel(parts[3])
            return 200, batch["obj"], None
        return 404, _error(f"no route {method} {path}"), None


def _multipart(content_type: str, body: bytes) -> tuple[str, str, bytes]:
    """(filename, purpose, file bytes) of a multipart/form-data upload."""
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    filename, purpose, content = "upload.jsonl", "", b""
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        data = part.get_payload(decode=True) or b""
        if name == "file":
            filename = part.get_filename() or filename
            content = data
        elif name == "purpose":
            purpose = data.decode()
    return filename, purpose, content
