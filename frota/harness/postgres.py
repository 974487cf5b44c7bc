"""A private PostgreSQL schema for one test or one benchmark run, dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


@contextmanager
def private_schema(dsn: str, prefix: str = "t") -> Iterator[tuple[str, str]]:
    """Create a fresh schema; yield (the DSN whose search_path is that schema, its name)."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}".encode())
    try:
        yield f"{dsn}{'&' if '?' in dsn else '?'}options=-csearch_path%3D{schema}", schema
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE".encode())
