"""API tokens of the collector's HTTP API, hashed at rest (``frota collector token add``).

A token is ``frota_<id>_<secret>``: ``id`` (8 hex digits) names it in the file and in logs, the
secret is 32 random bytes (URL-safe base64). The file (``http.tokens_file``, mode 0600) keeps only
the SHA-256 of the whole token: a token carries 256 bits of randomness, so a fast hash is enough
(a slow password hash protects guessable secrets, which these are not) and checking one costs
microseconds per request. The file is read again when it changes, so a token added while the
collector runs works at once.

Roles (``docs/collector.md``, "Who may call the API"): ``operador`` sees the vehicles of its own
operator (registry ``vehicles[].operator``); ``fiscal`` reads every vehicle; ``admin`` reads
everything and manages (token list).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from protocols.identity import write_secret
from protocols.records import ms_to_ts

ROLES: Final = ("operador", "fiscal", "admin")
TOKENS_SCHEMA: Final = 1
_TOKEN_RE: Final = re.compile(r"^frota_([0-9a-f]{8})_([A-Za-z0-9_-]{43})\Z")


class TokenError(ValueError):
    """A token file that cannot be used, or a bad request to add one; the message says why."""


@dataclass(frozen=True)
class Token:
    """One API token as kept in the file (never the token itself)."""

    id: str
    role: str
    operator: str | None
    created: str
    digest: str

    def public(self) -> dict[str, Any]:
        """What the API may show of it (no digest)."""
        return {"id": self.id, "role": self.role, "operator": self.operator, "created": self.created}


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _read(path: Path) -> list[Token]:
    if not path.exists():
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("schema") != TOKENS_SCHEMA:
            raise TokenError(f"{path}: not a token file (schema {TOKENS_SCHEMA})")
        return [
            Token(str(t["id"]), str(t["role"]), t.get("operator"), str(t["created"]), str(t["sha256"]))
            for t in doc["tokens"]
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise TokenError(f"{path}: unreadable token file: {err}") from err


def _write(path: Path, tokens: list[Token]) -> None:
    doc = {
        "schema": TOKENS_SCHEMA,
        "tokens": [{**t.public(), "sha256": t.digest} for t in tokens],
    }
    write_secret(path, (json.dumps(doc, indent=1) + "\n").encode())


def add(path: Path, role: str, operator: str | None = None) -> tuple[Token, str]:
    """Add a token to the file; return it and the token string (shown once, never stored)."""
    if role not in ROLES:
        raise TokenError(f"--role {role!r} is not one of {', '.join(ROLES)}")
    if role == "operador" and not operator:
        raise TokenError("an operador token needs --operator NAME (the registry's vehicles[].operator)")
    if role != "operador" and operator:
        raise TokenError(f"--operator is for operador tokens, not {role}")
    tokens = _read(path)
    taken = {t.id for t in tokens}
    token_id = secrets.token_hex(4)
    while token_id in taken:
        token_id = secrets.token_hex(4)
    text = f"frota_{token_id}_{secrets.token_urlsafe(32)}"
    now = ms_to_ts(int(dt.datetime.now(dt.UTC).timestamp() * 1000))
    token = Token(token_id, role, operator, now, _digest(text))
    _write(path, [*tokens, token])
    return token, text


def remove(path: Path, token_id: str) -> bool:
    """Remove a token by id; True if it was there."""
    tokens = _read(path)
    kept = [t for t in tokens if t.id != token_id]
    if len(kept) == len(tokens):
        return False
    _write(path, kept)
    return True


class Tokens:
    """The tokens of a file, re-read when the file changes; thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._by_id: dict[str, Token] = {}
        self._load()

    def _load(self) -> None:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = (0, 0)
        if stamp == self._stamp:
            return
        self._by_id = {t.id: t for t in _read(self.path)}
        self._stamp = stamp

    def all(self) -> list[Token]:
        """Every token (for admins)."""
        with self._lock:
            self._load()
            return sorted(self._by_id.values(), key=lambda t: t.id)

    def check(self, presented: str) -> Token | None:
        """The token matching ``presented``, or None (unknown, malformed or wrong secret)."""
        match = _TOKEN_RE.match(presented)
        if match is None:
            return None
        with self._lock:
            with contextlib.suppress(TokenError):  # keep the tokens last read; the API goes on
                self._load()
            token = self._by_id.get(match.group(1))
        if token is None or not hmac.compare_digest(token.digest, _digest(presented)):
            return None
        return token
