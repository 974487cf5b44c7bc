"""What the ingest keeps as a record's JSON (``records.record``, collector/intake.py): the record's
canonical form — the very bytes its chain hash is taken over (docs/records.md, "Canonical form":
RFC 8785 over the normalized record) — when the batch path wrote it and it says the same numbers
as the record; the record as received otherwise. On both backends. The expected texts are written
by hand from RFC 8785's rules (keys sorted by UTF-16 code unit, no whitespace, a whole double as
the integer it equals, strings as UTF-8 with only the escapes JSON requires)."""

from __future__ import annotations

import hashlib

from collector.chaincheck import check_store
from collector.ingest import Ingest
from collector.store import Store, record_row
from protocols.chain import GENESIS
from protocols.keyring import Keyring
from protocols.uplink import encode_batch
from tests.trust.fleet import A

TOPIC = f"frota/v1/{A}/up"
TS = "2026-03-02T14:00:01.000Z"


def _stored(store: Store) -> dict[int, tuple[str, str]]:
    return {int(seq): (str(text), str(digest)) for seq, text, digest in store._read(
        "SELECT seq, record, hash FROM records")}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_record_is_kept_in_the_canonical_form_its_hash_is_taken_over(store: Store) -> None:
    # keys in no order, a whole double, a double at its precision, an unknown field with text
    # that RFC 8785 writes as UTF-8 (ã, ç) and with characters it escapes (a quote, a newline,
    # U+001F)
    speed = {"vehicle": A, "ts": TS, "kind": "speed", "seq": 1, "agent": "a1",
             "kmh": 40.0, "device_seq": 7, "raw": "aa55", "prev": GENESIS,
             "note": 'Viação "São João"\n\x1f'}
    first = ('{"agent":"a1","device_seq":7,"kind":"speed","kmh":40,'
             '"note":"Viação \\"São João\\"\\n\\u001f","prev":"' + GENESIS + '","raw":"aa55",'
             '"seq":1,"ts":"2026-03-02T14:00:01.000Z","vehicle":"ABC1D23"}')
    position = {"vehicle": A, "ts": TS, "kind": "position", "lat": -23.5, "lon": -46.62,
                "kmh": 74.08, "course": 90.0, "agent": "a1", "seq": 2, "prev": _sha(first)}
    second = ('{"agent":"a1","course":90,"kind":"position","kmh":74.08,"lat":-23.5,'
              '"lon":-46.62,"prev":"' + _sha(first) + '","seq":2,'
              '"ts":"2026-03-02T14:00:01.000Z","vehicle":"ABC1D23"}')
    answer = Ingest(store, lambda: frozenset({A})).handle(
        TOPIC, encode_batch(A, "a1", [speed, position]))
    assert answer is not None
    assert answer[1].stored == [(1, 2)]
    # each row: the canonical text, and the hash column is that text's SHA-256
    assert _stored(store) == {1: (first, _sha(first)), 2: (second, _sha(second))}
    # the speed index's column still holds the km/h as a number
    assert [float(k) for (k,) in store._read("SELECT kmh FROM records ORDER BY seq")] == [
        40.0, 74.08]
    assert {p.cause for p in check_store(store, Keyring([])).problems} == {"unsigned"}


def test_a_record_whose_canonical_form_says_another_number_is_kept_as_received(
        store: Store) -> None:
    # 40.123 km/h: the canonical form rounds it to its precision (0.01: 40.12) — a number the
    # record does not hold — so the record is kept as it came (keys in the order received),
    # its hash still over the canonical form
    rec = {"vehicle": A, "ts": TS, "kind": "speed", "kmh": 40.123, "device_seq": 7,
           "raw": "aa55", "agent": "a1", "seq": 1, "prev": GENESIS}
    received = ('{"vehicle":"ABC1D23","ts":"2026-03-02T14:00:01.000Z","kind":"speed",'
                '"kmh":40.123,"device_seq":7,"raw":"aa55","agent":"a1","seq":1,'
                '"prev":"' + GENESIS + '"}')
    canonical = ('{"agent":"a1","device_seq":7,"kind":"speed","kmh":40.12,"prev":"' + GENESIS
                 + '","raw":"aa55","seq":1,"ts":"2026-03-02T14:00:01.000Z","vehicle":"ABC1D23"}')
    # a time with an offset (another way to write the same instant, which the canonical form
    # rewrites in UTC) takes the record-by-record path: kept as received too
    late = {"vehicle": A, "ts": "2026-03-02T11:00:02.000-03:00", "kind": "speed", "kmh": 41.0,
            "device_seq": 8, "raw": "aa55", "agent": "a1", "seq": 2, "prev": _sha(canonical)}
    late_received = ('{"vehicle":"ABC1D23","ts":"2026-03-02T11:00:02.000-03:00","kind":"speed",'
                     '"kmh":41.0,"device_seq":8,"raw":"aa55","agent":"a1","seq":2,'
                     '"prev":"' + _sha(canonical) + '"}')
    late_canonical = ('{"agent":"a1","device_seq":8,"kind":"speed","kmh":41,"prev":"'
                      + _sha(canonical) + '","raw":"aa55","seq":2,'
                      '"ts":"2026-03-02T14:00:02.000Z","vehicle":"ABC1D23"}')
    answer = Ingest(store, lambda: frozenset({A})).handle(TOPIC, encode_batch(A, "a1", [rec, late]))
    assert answer is not None
    assert answer[1].stored == [(1, 2)]
    assert _stored(store) == {1: (received, _sha(canonical)),
                              2: (late_received, _sha(late_canonical))}
    assert {p.cause for p in check_store(store, Keyring([])).problems} == {"unsigned"}


def test_a_frame_kept_as_received_before_and_again_canonical_is_the_same_content(
        store: Store) -> None:
    # A store from before keeps records as received ("kmh":40.0, keys in that order); the same
    # registrador frame arriving again under another seq, now kept canonically ("kmh":40), is
    # a duplicate frame (a hash-only entry), not a conflict.
    old = {"vehicle": A, "ts": TS, "kind": "speed", "kmh": 40.0, "device_seq": 7, "raw": "aa55",
           "agent": "a1", "seq": 1, "prev": GENESIS}
    canonical = ('{"agent":"a1","device_seq":7,"kind":"speed","kmh":40,"prev":"' + GENESIS
                 + '","raw":"aa55","seq":1,"ts":"2026-03-02T14:00:01.000Z","vehicle":"ABC1D23"}')
    store.put([record_row(old, 0, _sha(canonical), GENESIS)])
    assert _stored(store)[1][0].startswith('{"vehicle":"ABC1D23","ts":')
    again = {**old, "seq": 2, "prev": _sha(canonical)}
    answer = Ingest(store, lambda: frozenset({A})).handle(TOPIC, encode_batch(A, "a1", [again]))
    assert answer is not None
    assert answer[1].stored == [(2, 2)]
    assert answer[1].conflicts == []
    assert store._read("SELECT count(*) FROM conflicts")[0][0] == 0
    assert [(int(s), str(st)) for s, st in store._read("SELECT seq, state FROM links")] == [
        (2, "frame")]
