"""Only the studio's own page may drive it, whoever can make a browser send requests to it.

* **Host.** A request is served only if its `Host` is an IP address (127.0.0.1, or this machine's
  address on a network it serves with `--host 0.0.0.0`), localhost, or the name it was started
  with (`--host NAME`). A page whose domain re-resolves to 127.0.0.1 (DNS rebinding) sends its own
  name, and gets a 403: it never becomes same-origin with the studio. An address cannot be
  rebound, so any address passes. Jupyter and Ollama check the same header for the same reason.
* **Origin.** A write (POST, PUT, PATCH, DELETE) or a WebSocket that a browser sends from another
  page carries that page's `Origin`, and gets a 403, unless it is the studio's own origin or one
  given with `--allow-origin`. A request with no Origin (curl, a script, a DAW plugin) passes: a
  browser always sends one on a cross-origin write, including a form's multipart upload, which
  skips the CORS preflight.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from urllib.parse import urlsplit

from cadenza.settings import SettingError

LOOPBACK = ("127.0.0.1", "localhost", "::1")
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def hostname(host: str) -> str:
    """The name in a Host header or an origin's netloc, lowercased, without its port or IPv6
    brackets ("[::1]:8000" -> "::1")."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def origin_of(url: str) -> str:
    """"scheme://host[:port]" of an origin or a URL, lowercased: how the Origin header writes it."""
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.netloc:
        raise SettingError("allow_origin", f"must be scheme://host[:port], such as http://localhost:3000, got {url!r}")
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


class Guard:
    """ASGI middleware: a 403 for a foreign Host, and for a foreign Origin on a write or a WebSocket."""

    def __init__(self, app, hosts: Iterable[str] = (), origins: Iterable[str] = ()):
        self.app = app
        self.hosts = {hostname(h) for h in (*LOOPBACK, *hosts)} - {"0.0.0.0", "::"}  # an address, not a name
        self.origins = {origin_of(o) for o in origins}

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}
        why = self.refusal(scope, headers)
        if why is None:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":  # closed before it is accepted: the server answers the handshake 403
            return await send({"type": "websocket.close", "code": 1008})
        await _problem(send, 403, why)

    def refusal(self, scope, headers: dict[str, str]) -> str | None:
        """Why a request is refused, in one line; None to serve it."""
        host = headers.get("host", "")
        if not _is_address(hostname(host)) and hostname(host) not in self.hosts:
            return (f"Host {host!r} is not this server's: open the studio at its address (http://127.0.0.1:PORT) "
                    "or start it with --host NAME")
        origin = headers.get("origin")
        if origin is None or (scope["type"] == "http" and scope["method"] not in WRITES):
            return None
        scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
        if origin.lower() == f"{scheme}://{host.lower()}" or origin.lower() in self.origins:
            return None
        return f"Origin {origin!r} may not use this server: start it with --allow-origin {origin} to let that page"


class BodyLimit:
    """ASGI middleware: a body larger than its route's limit is a 413 as soon as its size is known
    (a Content-Length) or seen (a streamed body), not once it has been spooled to disk whole."""

    def __init__(self, app, limits: dict[str, int], default: int):
        self.app, self.limits, self.default = app, limits, default

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limits.get(scope["path"], self.default)
        length = dict(scope.get("headers", ())).get(b"content-length", b"")
        if length.isdigit() and int(length) > limit:
            return await _problem(send, 413, _too_large(limit))
        seen, refused = 0, False

        async def counted():
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request" and not refused:
                seen += len(message.get("body", b""))
                if seen > limit:
                    refused = True
                    await _problem(send, 413, _too_large(limit))
                    return {"type": "http.disconnect"}  # the app stops reading; its answer is not sent
            return message

        async def unless_refused(message):
            if not refused:
                await send(message)

        try:
            await self.app(scope, counted, unless_refused)
        except Exception:
            if not refused:  # a refused body ends the app's reading with an error: the 413 is sent
                raise


def _too_large(limit: int) -> str:
    return f"the request body is larger than this server takes here ({limit // 1024} KiB)"


async def _problem(send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
