"""Who may use what the tool serves on a port: the dashboard and the gRPC storage proxy each need a per-run token.

A port on 127.0.0.1 is open to every account of the machine, and what these two
servers hand out (each trial's exact ε and F1, the whole study database) is as
owner-side as the files. So each ``dashboard`` and ``proxy`` run makes a token of
its own (``new_token``: 256 random bits from the OS), prints it once, in the URL to
open or the storage URL to give the workers, and writes that URL owner-only (0600)
beside the study file (``token_file``: removed when the server stops). A request
without the token is refused before any study data: the dashboard answers 401
(``TokenGate``); the proxy ends the call with UNAUTHENTICATED (``tuner.storage``'s
interceptor, with the client side of the token).

* dashboard: open the printed URL once; its ``?token=`` sets a cookie (HttpOnly,
  SameSite=Strict, named after the port) and redirects to the same page without it.
  Scripts may send ``Authorization: Bearer TOKEN`` instead.
* proxy: every call carries ``authorization: Bearer TOKEN`` metadata; a worker takes
  the token from its storage URL, ``grpc://HOST:PORT?token=TOKEN``, else from
  ``$SWAGPPM_TUNE_PROXY_TOKEN`` (the client side is ``tuner.storage``'s).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterable, Iterator
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from swagppm import ConfigError
from tuner.outputs import write_atomic
from tuner.storage import same_token

REFUSED = ("swagppm-tune dashboard: this page needs the run's token (it shows private figures). Open the URL that "
           "`swagppm-tune dashboard` printed, or the one in the token file it wrote beside the study file.\n")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def new_token() -> str:
    """A fresh random token (256 bits from the OS), URL- and cookie-safe."""
    return secrets.token_urlsafe(32)


def token_path(study: Path, kind: str, port: int) -> Path:
    """Where a server's token URL is kept: ``<study stem>.<kind>-<port>.token`` beside the study file."""
    return study.with_name(f"{study.stem}.{kind}-{port}.token")


@contextlib.contextmanager
def token_file(path: Path, url: str, *, echo: Callable[[str], None]) -> Iterator[None]:
    """``url`` (which holds the token) written owner-only to ``path`` while the block runs, then removed if it is
    still this run's. A folder that cannot be written is one warning: the printed URL is then the only copy."""
    try:
        write_atomic(path, url + "\n")
    except ConfigError as error:
        echo(f"warning: the token could not be kept ({error}); use the URL printed above")
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if path.read_text(encoding="utf-8").strip() == url:
                path.unlink()


class TokenGate:
    """WSGI middleware in front of optuna-dashboard: a request passes with the run's token (the cookie its URL set,
    or an ``Authorization: Bearer`` header); without it, 401 and a line saying what to open, no study data."""

    def __init__(self, app: WSGIApp, *, token: str, port: int) -> None:
        self.app, self.token = app, token
        self.cookie = f"swagppm_dashboard_{port}"  # cookies ignore the port: two dashboards keep their own

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        query = parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        given = next((value for key, value in query if key == "token"), None)
        if same_token(given, self.token):  # the printed URL: remember it in a cookie, and drop it from the address
            rest = urlencode([(key, value) for key, value in query if key != "token"])
            location = quote(environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "/")) + (
                f"?{rest}" if rest else "")
            start_response("303 See Other", [
                ("Location", location), ("Content-Length", "0"), ("Cache-Control", "no-store"),
                ("Set-Cookie", f"{self.cookie}={self.token}; HttpOnly; SameSite=Strict; Path=/")])
            return [b""]
        if self._carries_token(environ):
            return self.app(environ, start_response)
        body = REFUSED.encode()
        start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                            ("Content-Length", str(len(body))), ("Cache-Control", "no-store"),
                                            ("WWW-Authenticate", 'Bearer realm="swagppm-tune dashboard"')])
        return [body]

    def _carries_token(self, environ: dict[str, Any]) -> bool:
        header = environ.get("HTTP_AUTHORIZATION", "")
        if header.startswith("Bearer ") and same_token(header[len("Bearer "):].strip(), self.token):
            return True
        try:
            cookies = SimpleCookie(environ.get("HTTP_COOKIE", ""))
        except CookieError:
            return False
        morsel = cookies.get(self.cookie)
        return morsel is not None and same_token(morsel.value, self.token)
