"""The digital disc at rest: one vehicle-day of stored records as one compact blob (issue 15 item
6, the codec; docs/collector.md, "The digital disc at rest").

:func:`encode_day` takes a day's records as the store keeps them (their JSON texts) and
:func:`decode_day` gives back exactly those texts, byte for byte, in the same order. In between:

- each record is split by its *shape* (its keys in order) into columns, one per key;
- integer columns and ``ts`` (as ms) are stored as deltas of deltas in 64-bit words (a 1 Hz
  clock, a seq that counts by one, an odometer that grows steadily become runs of zeros);
- float columns whose values are exact in thousandths are stored the same way, scaled by 1000;
- ``prev`` is dropped wherever it is the chain hash of the same agent's record before it in the
  same day (computed again on decode, so the chain is preserved by construction);
- ``raw`` (hex) is kept as bytes; other strings through a dictionary; anything else as JSON;
- a record whose text is not what its parsed form writes back is kept verbatim;
- the whole is compressed with zstd.

Hand-rolled because no library packs JSON records column by column with these encodings; zstd
(zstandard) does the entropy coding. Not yet wired into the store's readers (see the report in
docs/collector.md): this module is the codec and its measurement (``python -m bench.disc``).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from itertools import accumulate
from typing import Any, Final

import orjson
import zstandard

from collector import disc_raw
from protocols.chain import try_hash
from protocols.records import RecordError, ms_to_ts, ts_to_ms

#: Format version of a blob (its first byte): 2 may drop frames (:data:`RAW_FLAGS`); 1 is read.
VERSION: Final = 2
VERSIONS: Final = (1, 2)
#: The column saying, for each record with ``raw``, how its frame is rebuilt (0: kept).
RAW_FLAGS: Final = "\x00raw"
LEVEL: Final = 19
_I64: Final = "q"


def _dod(values: Sequence[int]) -> bytes:
    """Deltas of deltas as little-endian int64 words."""
    out = array(_I64)
    prev, prev_delta = 0, 0
    for value in values:
        delta = value - prev
        out.append(delta - prev_delta)
        prev, prev_delta = value, delta
    return out.tobytes()


def _undod(data: bytes) -> list[int]:
    words = array(_I64)
    words.frombytes(data)
    return list(accumulate(accumulate(words)))


def _int_ok(value: Any) -> bool:
    return type(value) is int and -(1 << 62) < value < (1 << 62)


def _thousandths(value: Any) -> int | None:
    if type(value) is not float or not -1e12 < value < 1e12:
        return None
    scaled = round(value * 1000)
    return scaled if scaled / 1000 == value else None


def _ts_ms(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    try:
        ms = ts_to_ms(value)
    except (RecordError, ValueError):
        return None
    return ms if ms_to_ts(ms) == value else None


def _column(name: str, values: list[Any]) -> tuple[str, bytes]:
    """The best encoding of one column: (kind, bytes)."""
    if all(_int_ok(v) for v in values):
        return "int", _dod(values)
    if name == "ts":
        stamps = [_ts_ms(v) for v in values]
        if all(s is not None for s in stamps):
            return "ts", _dod([s for s in stamps if s is not None])
    scaled = [_thousandths(v) for v in values]
    if all(s is not None for s in scaled):
        return "f3", _dod([s for s in scaled if s is not None])
    if name == "raw" and all(isinstance(v, str) and len(v) % 2 == 0 for v in values):
        try:
            chunks = [bytes.fromhex(v) for v in values]
        except ValueError:
            chunks = []
        if chunks and all(c.hex() == v for c, v in zip(chunks, values, strict=True)):
            return "hex", _dod([len(c) for c in chunks]) + b"".join(chunks)
    if all(isinstance(v, str) for v in values):
        words: dict[str, int] = {}
        index = [words.setdefault(v, len(words)) for v in values]
        return "dict", orjson.dumps(list(words)) + b"\n" + _dod(index)
    return "json", orjson.dumps(values)


def _uncolumn(kind: str, data: bytes, count: int) -> list[Any]:
    if kind == "int":
        return list(_undod(data))
    if kind == "ts":
        seen: dict[int, str] = {}   # 1 Hz records share their second: each written once
        return [seen.get(ms) or seen.setdefault(ms, ms_to_ts(ms)) for ms in _undod(data)]
    if kind == "f3":
        return [ms / 1000 for ms in _undod(data)]
    if kind == "hex":
        lengths = _undod(data[: 8 * count])
        out, at = [], 8 * count
        for length in lengths:
            out.append(data[at:at + length].hex())
            at += length
        return out
    if kind == "dict":
        head, _, body = data.partition(b"\n")
        words = orjson.loads(head)
        return [words[i] for i in _undod(body)]
    values: list[Any] = orjson.loads(data)
    return values


def encode_day(texts: Sequence[str]) -> bytes:
    """One vehicle-day's record texts → a blob (see the module docstring)."""
    records: list[dict[str, Any] | None] = []
    for text in texts:
        rec = orjson.loads(text)
        same = isinstance(rec, dict) and orjson.dumps(rec).decode() == text
        records.append(rec if same else None)
    hashes = {(r.get("agent"), r.get("seq")): try_hash(r) for r in records if r is not None}
    # the decoder rebuilds each prev with the fast hash when it gives every record's chain hash
    fast = all(_fast_hash(r) == hashes[(r.get("agent"), r.get("seq"))]
               for r in records if r is not None)
    shapes: dict[tuple[str, ...], int] = {}
    shape_of: list[int] = []
    columns: dict[str, list[Any]] = {}
    chained: list[int] = []
    verbatim: list[str] = []
    for i, rec in enumerate(records):
        if rec is None:
            shape_of.append(-1)
            verbatim.append(texts[i])
            continue
        prev = rec.get("prev")
        linked = prev is not None and prev == hashes.get((rec.get("agent"), _minus1(rec)))
        keys = tuple(k if not (k == "prev" and linked) else "\x00prev" for k in rec)
        shape_of.append(shapes.setdefault(keys, len(shapes)))
        chained.append(int(linked))
        for key, value in rec.items():
            if key == "prev" and linked:
                continue
            columns.setdefault(key, []).append(value)
    flags = _drop_raw(records, columns)
    if any(flags):
        columns[RAW_FLAGS] = flags
    encoded = {name: _column(name, values) for name, values in columns.items()}
    head = {"n": len(texts), "shapes": [list(s) for s in shapes], "verbatim": verbatim,
            "fast": int(fast),
            "columns": [[name, kind, len(columns[name]), len(data)]
                        for name, (kind, data) in encoded.items()]}
    body = b"".join([_dod(shape_of)] + [data for _, data in encoded.values()])
    head_bytes = orjson.dumps(head)
    plain = len(head_bytes).to_bytes(4, "little") + head_bytes + body
    return bytes([VERSION]) + zstandard.ZstdCompressor(level=LEVEL).compress(plain)


def _raw_bytes(value: Any) -> bytes | None:
    """A ``raw`` value's bytes when it is lowercase hex that writes back the same."""
    if not isinstance(value, str) or len(value) % 2:
        return None
    try:
        data = bytes.fromhex(value)
    except ValueError:
        return None
    return data if data.hex() == value else None


def _drop_raw(records: list[dict[str, Any] | None], columns: dict[str, list[Any]]) -> list[int]:
    """For each record with ``raw``, in order: how its frame is rebuilt (collector/disc_raw.py;
    0: kept); the ``raw`` column gets an empty string where it is."""
    flags: list[int] = []
    ctx = disc_raw.Context()
    at = 0
    for rec in records:
        if rec is None or "raw" not in rec:
            continue
        data = _raw_bytes(rec["raw"])
        how = disc_raw.NONE if data is None else disc_raw.choose(rec, data, ctx)
        if data is not None:
            ctx.saw(data)
        if how:
            columns["raw"][at] = ""
        flags.append(how)
        at += 1
    return flags


def _fill_raw(built: list[dict[str, Any] | str], ready: list[dict[str, Any] | None],
              flags: list[int]) -> None:
    """Rebuild the dropped frames, in order, from the same context as the encoder's."""
    how_of = iter(flags)
    ctx = disc_raw.Context()
    for i, rec in enumerate(built):
        if isinstance(rec, str) or "raw" not in rec:
            continue
        how = next(how_of)
        if how:
            data = disc_raw.rebuild(how, rec, ctx)
            if data is None:
                raise ValueError("a dropped frame cannot be rebuilt: the blob is damaged")
            rec["raw"] = data.hex()
            twin = ready[i]
            if twin is not None:
                twin["raw"] = rec["raw"]
        else:
            data = _raw_bytes(rec["raw"])
        if data is not None:
            ctx.saw(data)


def _fast_hash(rec: dict[str, Any]) -> str | None:
    """The chain hash of a flat record whose canonical form is its sorted JSON with integral
    floats written as integers — what most records are. The encoder checks it against
    :func:`protocols.chain.try_hash` for every record of the day and says in the blob whether
    the decoder may use it (a SHA-256 of the canonical form is most of the decoding's cost;
    this form takes a tenth of the general one)."""
    try:
        ready = {k: int(v) if type(v) is float and v.is_integer() else v for k, v in rec.items()}
        return hashlib.sha256(orjson.dumps(ready, option=orjson.OPT_SORT_KEYS)).hexdigest()
    except (TypeError, ValueError, OverflowError, orjson.JSONEncodeError):
        return None


def _minus1(rec: dict[str, Any]) -> int | None:
    seq = rec.get("seq")
    return seq - 1 if type(seq) is int else None


def decode_day(blob: bytes) -> list[str]:
    """A blob → the record texts it was made from, byte for byte, in order."""
    return [text for text, _ in decode_records(blob)]


def decode_records(blob: bytes) -> list[tuple[str, dict[str, Any] | None]]:
    """A blob → each record's text (as :func:`decode_day`) and its parsed form (None for a text
    kept verbatim), so that a reader needs not parse the texts again."""
    if not blob or blob[0] not in VERSIONS:
        raise ValueError("not a frota disc blob of version 1 or 2")
    plain = zstandard.ZstdDecompressor().decompress(blob[1:])
    size = int.from_bytes(plain[:4], "little")
    head = orjson.loads(plain[4:4 + size])
    at = 4 + size
    count = int(head["n"])
    shape_of = _undod(plain[at:at + 8 * count])
    at += 8 * count
    columns: dict[str, list[Any]] = {}
    for name, kind, length, nbytes in head["columns"]:
        columns[name] = _uncolumn(kind, plain[at:at + nbytes], length)
        at += nbytes
    fast = bool(head.get("fast"))
    # the values as the fast hash writes them (integral floats as integers), column by column
    ready_cols = {k: _ready(v) for k, v in columns.items()} if fast else columns
    cursor = dict.fromkeys(columns, 0)
    shapes = [tuple(s) for s in head["shapes"]]
    apart = [any(ready_cols[k] is not columns[k] for k in shape if k in columns)
             for shape in shapes]
    verbatim = iter(head["verbatim"])
    built: list[dict[str, Any] | str] = []
    ready: list[dict[str, Any] | None] = []
    for shape in shape_of:
        if shape < 0:
            built.append(next(verbatim))
            ready.append(None)
            continue
        rec: dict[str, Any] = {}
        twin: dict[str, Any] = {} if apart[shape] else rec
        for key in shapes[shape]:
            if key == "\x00prev":
                rec["prev"] = twin["prev"] = None  # filled below, in chain order
                continue
            at = cursor[key]
            rec[key] = columns[key][at]
            twin[key] = ready_cols[key][at]
            cursor[key] = at + 1
        built.append(rec)
        ready.append(twin)
    if RAW_FLAGS in columns:
        _fill_raw(built, ready, columns[RAW_FLAGS])
    _fill_prev(built, ready, shapes, shape_of, fast)
    return [(item, None) if isinstance(item, str) else (orjson.dumps(item).decode(), item)
            for item in built]


def _ready(values: list[Any]) -> list[Any]:
    """The column with integral floats as integers (the same list when it has none)."""
    if not any(type(v) is float and v.is_integer() for v in values):
        return values
    return [int(v) if type(v) is float and v.is_integer() else v for v in values]


def _fill_prev(built: list[dict[str, Any] | str], ready: list[dict[str, Any] | None],
               shapes: list[tuple[str, ...]], shape_of: list[int], fast: bool) -> None:
    """Each dropped ``prev`` is the hash of the same agent's record before it (by seq), whose
    own ``prev`` is filled first (``fast``: hashed as :func:`_fast_hash` does, from the
    ``ready`` twin of each record)."""
    by_key = {(r.get("agent"), r.get("seq")): i for i, r in enumerate(built)
              if isinstance(r, dict)}
    todo = sorted((i for i, r in enumerate(built) if isinstance(r, dict) and shape_of[i] >= 0
                   and "\x00prev" in shapes[shape_of[i]]),
                  key=lambda i: (str(_get(built[i], "agent")), int(_get(built[i], "seq") or 0)))
    sha256, dumps, sort = hashlib.sha256, orjson.dumps, orjson.OPT_SORT_KEYS
    for i in todo:
        rec = built[i]
        assert isinstance(rec, dict)
        before = by_key[(rec.get("agent"), _minus1(rec))]
        if fast:
            twin = ready[before]
            assert twin is not None
            digest: str | None = sha256(dumps(twin, option=sort)).hexdigest()
        else:
            digest = try_hash(built[before])
        rec["prev"] = digest
        twin = ready[i]
        if twin is not None:
            twin["prev"] = digest


def _get(item: dict[str, Any] | str, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else None
