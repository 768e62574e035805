"""What every response and request goes through: security headers, the Host check on a
loopback bind, and the access token on any other bind.

Why a Host check on loopback: a web page on the internet can make a browser send requests to
127.0.0.1 under a name it controls (DNS rebinding); refusing any Host but a loopback name
closes that door without a token. A non-loopback bind is reachable by other machines, so there
every request must carry the token (a header, a ``token=`` query parameter once, or the cookie
that such a request sets).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE = "kbpack_token"
# No script, no remote anything: styles and images from this server only, forms post back here.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}


def is_loopback(host: str) -> bool:
    if host.strip("[]") in LOOPBACK_NAMES or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name part of a Host header ("[::1]:8080" -> "[::1]", "localhost:80" -> "localhost")."""
    header = header.strip().lower()
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class Guard:
    """ASGI middleware: refuse foreign Hosts (loopback bind) or missing tokens (other binds),
    and add the security headers to every response."""

    def __init__(self, app: ASGIApp, *, token: str | None, loopback: bool) -> None:
        self.app = app
        self.token = token
        self.loopback = loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        if self.loopback and not is_loopback(host_name(headers.get("host", ""))):
            await plain(send_secured, 421, "this server answers to localhost only")
            return
        if self.token is not None:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            if self._matches(query.get("token")):
                # a token in the URL becomes a cookie and leaves the URL (and the history)
                rest = urlencode({k: v for k, v in query.items() if k != "token"})
                path = scope.get("raw_path") or scope["path"].encode()
                where = local_path(path.decode("latin-1")) + (f"?{rest}" if rest else "")
                cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
                await redirect(send_secured, where, cookie)
                return
            bearer = headers.get("authorization", "")
            given = bearer[7:] if bearer.lower().startswith("bearer ") else None
            if not (self._matches(given) or self._matches(cookie_token(headers.get("cookie")))):
                await plain(
                    send_secured,
                    401,
                    "this server needs its token: open the URL that kbpack serve printed, "
                    "or send 'Authorization: Bearer TOKEN'",
                )
                return
        await self.app(scope, receive, send_secured)

    def _matches(self, given: str | None) -> bool:
        assert self.token is not None
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())


def local_path(path: str) -> str:
    """``path`` as a redirect target that stays on this server: a browser reads ``//host/x``
    (and ``/\\host/x``) as another host, so leading slashes and backslashes collapse to one
    (``GET //evil.example/x?token=T`` answered ``Location: //evil.example/x``: an open
    redirect)."""
    return "/" + path.lstrip("/\\")


def cookie_token(header: str | None) -> str | None:
    if not header:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except Exception:  # a malformed cookie header is the same as none
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel else None


async def plain(send: Send, status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def redirect(send: Send, location: str, cookie: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [
                (b"location", location.encode("latin-1")),
                (b"set-cookie", cookie.encode("latin-1")),
                (b"content-length", b"0"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})
