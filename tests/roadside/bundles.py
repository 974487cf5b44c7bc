"""Helpers for the bundle tests: a chained store of a shipped scenario, and tampering."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path

import orjson

from collector.entries import enter
from collector.store import open_store, record_row
from protocols.chain import GENESIS, record_hash
from protocols.records import ts_to_ms
from tests.pages.fleet import AS_OF, _render, write_registry


def chained_store(folder: Path) -> tuple[Path, Path]:
    """``sp-clean`` (FRT1A01, 2026-03-02) as one agent's chain (agent ``a1``, seq 1.., prev as
    docs/trust.md says) — seq 101 a record of the day before, as a registrador catch-up gives —
    with its chain hashes as the ingest writes them, and two operator entries chained by the collector's entry path, in a SQLite
    store; (database, registry)."""
    registry = write_registry(folder)
    records = _render("sp-clean", folder / "clean.jsonl")
    records.sort(key=lambda r: ts_to_ms(str(r["ts"])))
    # a catch-up: a record of the day before (09:00 local) given a seq among 2026-03-02's
    records.insert(100, {"vehicle": "FRT1A01", "ts": "2026-03-01T12:00:00.000Z", "kind": "device",
                         "device": "gps", "status": "ok"})
    prev = GENESIS
    rows = []
    for seq, rec in enumerate(records, start=1):
        chained = {**rec, "agent": "a1", "seq": seq, "prev": prev}
        digest = record_hash(chained)
        rows.append(record_row(chained, AS_OF, digest, prev))  # its hash in its row, as the ingest
        prev = digest
    db = folder / "collector.db"
    store = open_store(str(db))
    try:
        store.put(rows, (), [("FRT1A01", ts_to_ms(str(records[-1]["ts"])), AS_OF, "a1")])
        # two operator entries that day: the collector's own chain (agent "operator", seq 1-2)
        for hour in ("15", "16"):
            enter(store, None, {"vehicle": "FRT1A01", "ts": f"2026-03-02T{hour}:00:00Z",
                                "kind": "incident", "cause": "breakdown"}, AS_OF, "inspetor", None)
    finally:
        store.close()
    return db, registry


def tamper(data: bytes, edit: Callable[[list[bytes]], list[bytes]]) -> bytes:
    """The bundle with ``records.jsonl``'s lines edited, everything else (manifest, signature)
    left as it was."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            content = src.read(info)
            if info.filename == "records.jsonl":
                content = b"".join(line + b"\n" for line in edit(content.splitlines()))
            dst.writestr(info.filename, content)
    return out.getvalue()


def seq_of(line: bytes) -> int:
    """A record line's seq."""
    return int(orjson.loads(line)["seq"])
