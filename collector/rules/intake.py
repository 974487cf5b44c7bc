"""JSON Lines → validated records with their ``ts`` in ms (``frota check``'s reader).

Validation is ``protocols.records.validated_ts_ms``, the one record validator (with its inline
fast path for speed and position records).
"""

from __future__ import annotations

import orjson

from protocols.records import Record, validated_ts_ms


def parse_line(line: bytes | str) -> tuple[int, Record]:
    """One JSON Lines line → (ts in ms, record); RecordError (or ValueError for bad JSON)."""
    rec = orjson.loads(line)
    return validated_ts_ms(rec), rec
