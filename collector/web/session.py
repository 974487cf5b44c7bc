"""Who is looking at the pages: a login with an API token (``frota collector token add``) gives
a signed session cookie that names the token; the token is checked again on every request, so
removing it ends the session. CSRF: every form carries the value of a signed ``frota_csrf``
cookie (double submit), and every cookie is ``HttpOnly`` and ``SameSite=Strict``. The signing
key is made at start (a restart logs everyone out). Signing: itsdangerous."""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Response
from itsdangerous import BadSignature, URLSafeTimedSerializer

from collector.http import OPEN, Access, log_fiscal_read
from collector.tokens import Token

SESSION_COOKIE = "frota_sessao"
CSRF_COOKIE = "frota_csrf"
#: A session lasts a working day.
SESSION_MAX_AGE_S = 12 * 3600


class LoginRequiredError(Exception):
    """The page needs a logged-in user: the handler redirects to the login page."""


class Sessions:
    """Signs and reads the session and CSRF cookies."""

    def __init__(self, key: bytes | None = None) -> None:
        secret = key if key is not None else secrets.token_bytes(32)
        self._session = URLSafeTimedSerializer(secret, salt="frota-sessao")
        self._csrf = URLSafeTimedSerializer(secret, salt="frota-csrf")
        #: sessions ended by "Sair" (id: when), kept until their cookie would have expired: a
        #: copy of the cookie must not outlive the logout
        self._ended: dict[str, float] = {}
        self._lock = threading.Lock()

    def login(self, response: Response, token: Token, secure: bool) -> None:
        """Set the session cookie for a checked token (with an id of its own, for the logout)."""
        cookie = self._session.dumps({"t": token.id, "s": secrets.token_urlsafe(16)})
        response.set_cookie(SESSION_COOKIE, cookie, max_age=SESSION_MAX_AGE_S, httponly=True,
                            samesite="strict", secure=secure)

    def logout(self, request: Request, response: Response) -> None:
        """End the request's session (its cookie refused from now on, wherever it was copied)
        and drop the cookie."""
        data = self._data(request)
        now = time.monotonic()
        with self._lock:
            for ended, when in list(self._ended.items()):
                if now - when > SESSION_MAX_AGE_S:
                    del self._ended[ended]
            sid = None if data is None else data.get("s")
            if isinstance(sid, str):
                self._ended[sid] = now
        response.delete_cookie(SESSION_COOKIE)

    def _data(self, request: Request) -> dict[str, object] | None:
        """The session cookie's signed content (None: no cookie, forged or expired)."""
        raw = request.cookies.get(SESSION_COOKIE)
        if raw is None:
            return None
        try:
            data = self._session.loads(raw, max_age=SESSION_MAX_AGE_S)
        except BadSignature:
            return None
        return data if isinstance(data, dict) else None

    def user(self, request: Request) -> Token | None:
        """The token of the request's session (None: not logged in, or token removed)."""
        access: Access | None = request.app.state.access
        if access is None:
            return OPEN
        data = self._data(request)
        if data is None:
            return None
        with self._lock:
            if data.get("s") in self._ended:
                return None
        token_id = data.get("t")
        return next((t for t in access.tokens.all() if t.id == token_id), None)

    def csrf(self, request: Request) -> str:
        """The request's CSRF value (a new one when it has none; :meth:`keep_csrf` sets it)."""
        raw = request.cookies.get(CSRF_COOKIE)
        if raw is not None:
            try:
                value = self._csrf.loads(raw)
                if isinstance(value, str):
                    return value
            except BadSignature:
                pass
        value = getattr(request.state, "new_csrf", None) or secrets.token_urlsafe(24)
        request.state.new_csrf = value
        return str(value)

    def keep_csrf(self, request: Request, response: Response) -> None:
        """Set the CSRF cookie when this request made a new value."""
        value = getattr(request.state, "new_csrf", None)
        if value:
            response.set_cookie(CSRF_COOKIE, self._csrf.dumps(value), httponly=True,
                                samesite="strict", secure=request.url.scheme == "https")

    def check_csrf(self, request: Request, presented: str) -> None:
        """403 unless the form's CSRF value is the cookie's."""
        raw = request.cookies.get(CSRF_COOKIE)
        try:
            value = None if raw is None else self._csrf.loads(raw)
        except BadSignature:
            value = None
        if not isinstance(value, str) or not hmac.compare_digest(value, presented):
            raise HTTPException(status_code=403, detail="formulário expirado ou inválido (CSRF)")


def _page_user(request: Request) -> Token:
    sessions: Sessions = request.app.state.sessions
    user = sessions.user(request)
    if user is None:
        raise LoginRequiredError
    log_fiscal_read(request, user)
    return user


PageUser = Annotated[Token, Depends(_page_user)]
