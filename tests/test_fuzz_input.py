"""Hostile input, fuzzed (issue 12 item 4): arbitrary and mutated bytes into the collector's payload
path and into every device decoder. Nothing escapes, every payload is answered, and what one
payload may cost stays within the documented bounds (docs/collector.md, "Bounds")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.ingest import Ingest
from collector.intake import MAX_BATCH_RECORDS, MAX_REASON_CHARS, MAX_REJECT_ROWS, prepare
from collector.store import open_store
from protocols import registry
from protocols.records import MAX_SAFE_INT, validate
from protocols.uplink import PAYLOAD_SCHEMA, ZSTD_MAGIC, encode_batch
from tests.collector.helpers import T0, VEHICLES, speed

V1 = VEHICLES[0]
TOPIC = f"frota/v1/{V1}/up"
FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _known() -> frozenset[str]:
    return frozenset(VEHICLES)


def _good_payloads() -> list[bytes]:
    records = [speed(V1, "a1", n, at_s=n) for n in range(1, 6)]
    return [encode_batch(V1, "a1", records, compress=False), encode_batch(V1, "a1", records)]


@st.composite
def _mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A seed with a few random edits: bytes flipped, cut, inserted, a slice repeated."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        edit = draw(st.sampled_from(["flip", "cut", "insert", "repeat", "truncate"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if edit == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif edit == "cut":
            del data[at : at + draw(st.integers(1, 8))]
        elif edit == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif edit == "repeat":
            data[at:at] = data[at : at + draw(st.integers(1, 64))] * draw(st.integers(1, 20))
        else:
            del data[at:]
    return bytes(data)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=4),
    max_leaves=12,
)
_FIELDS = st.sampled_from(["vehicle", "ts", "kind", "agent", "seq", "device_seq", "raw", "kmh",
                           "lat", "lon", "slot", "driver", "activity", "door", "open",
                           "boarded", "alighted", "event", "trip", "line", "scheduled", "cause",
                           "finding", "to", "device", "status", "detail", "extra"])


@st.composite
def _hostile_record(draw: st.DrawFn) -> Any:
    """A speed record with some fields replaced by arbitrary JSON, or arbitrary JSON."""
    if draw(st.booleans()):
        return draw(_JSON)
    rec: dict[str, Any] = speed(V1, "a1", draw(st.integers(1, 1000)), at_s=draw(st.integers(0, 99)))
    for key in draw(st.lists(_FIELDS, max_size=3)):
        rec[key] = draw(_JSON)
    return rec


def _envelope(records: list[Any], *, compress: bool) -> bytes:
    body = json.dumps({"schema": PAYLOAD_SCHEMA, "vehicle": V1, "agent": "a1",
                       "records": records}).encode()
    return zstandard.ZstdCompressor().compress(body) if compress else body


def _check_answered(topic: str, payload: bytes) -> None:
    out = prepare(topic, payload, _known, T0)
    assert out.rejects or out.ack is not None, "a payload nobody answered and nothing recorded"
    assert len(out.rejects) <= MAX_REJECT_ROWS
    assert len(out.rows) <= MAX_BATCH_RECORDS
    for reject in out.rejects:
        assert len(reject.reason) <= MAX_REASON_CHARS + len(" (10000 records)")
    if out.ack is not None:
        for first, last, reason in out.ack.rejected:
            assert 1 <= first <= last <= MAX_SAFE_INT
            assert len(reason) <= MAX_REASON_CHARS


@FUZZ
@given(payload=st.binary(max_size=2048),
       topic=st.sampled_from([TOPIC, "frota/v1/NOPE/up", "frota/v1//up", "x", "frota/v1/a b/up"]))
def test_arbitrary_bytes_are_answered(payload: bytes, topic: str) -> None:
    _check_answered(topic, payload)


@FUZZ
@given(payload=_mutated(_good_payloads()))
def test_mutated_batches_are_answered(payload: bytes) -> None:
    _check_answered(TOPIC, payload)


@FUZZ
@given(records=st.lists(_hostile_record(), max_size=12), compress=st.booleans())
def test_hostile_records_are_each_stored_or_rejected(records: list[Any], compress: bool) -> None:
    out = prepare(TOPIC, _envelope(records, compress=compress), _known, T0)
    assert out.ack is not None
    assert not out.whole_payload_rejected
    answered = {seq for a, b in out.ack.stored for seq in range(a, b + 1)}
    answered |= {seq for a, b, _ in out.ack.rejected for seq in range(a, b + 1)}
    for rec in records:
        seq = rec.get("seq") if isinstance(rec, dict) else None
        if type(seq) is int and 1 <= seq <= MAX_SAFE_INT:
            assert seq in answered, rec
    for row in out.rows:  # what is stored is a valid record
        validate(json.loads(row[9]))


@pytest.fixture(scope="module")
def ingest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ingest]:
    store = open_store(str(tmp_path_factory.mktemp("fuzz") / "collector.db"))
    try:
        yield Ingest(store, _known)
    finally:
        store.close()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(payload=st.one_of(st.binary(max_size=512), _mutated(_good_payloads()),
                         st.builds(_envelope, st.lists(_hostile_record(), max_size=8),
                                   compress=st.booleans())))
def test_the_store_takes_whatever_intake_accepts(ingest: Ingest, payload: bytes) -> None:
    ingest.handle(TOPIC, payload)  # raises only StoreError, and SQLite here is healthy


def test_a_million_empty_records_cost_one_reject_row() -> None:
    # 1,000,000 × "{}" joined by "," is 2,999,999 bytes of records: a few hundred compressed.
    body = (b'{"schema":%d,"vehicle":"%s","agent":"a1","records":[' % (PAYLOAD_SCHEMA, V1.encode())
            + b",".join([b"{}"] * 1_000_000) + b"]}")
    payload = zstandard.ZstdCompressor(level=19).compress(body)
    assert payload.startswith(ZSTD_MAGIC)
    assert len(payload) < 4096
    out = prepare(TOPIC, payload, _known, T0)
    [reject] = out.rejects
    assert reject.reason == f"too many records: 1000000 > {MAX_BATCH_RECORDS} in one batch"
    assert out.rows == []


def test_records_failing_alike_share_one_row() -> None:
    records = [{**speed(V1, "a1", n, at_s=n), "kmh": -1} for n in range(1, 5001)]
    out = prepare(TOPIC, _envelope(records, compress=True), _known, T0)
    [reject] = out.rejects
    assert reject.reason == "invalid record: speed record: kmh=-1 is not a number in [0, 400] " \
                            "(5000 records)"
    assert (reject.first_seq, reject.last_seq) == (1, 5000)
    assert len(json.loads(reject.payload)) == 5000
    assert out.ack is not None
    assert out.ack.rejected == [(1, 5000, "invalid record: speed record: kmh=-1 is not a number "
                                          "in [0, 400]")]


def test_many_reasons_are_bounded_and_long_values_cut() -> None:
    records = [{**speed(V1, "a1", n, at_s=n), "kmh": -n} for n in range(1, 101)]
    records.append({**speed(V1, "a1", 101, at_s=1), "kmh": "x" * 100_000})
    out = prepare(TOPIC, _envelope(records, compress=True), _known, T0)
    assert len(out.rejects) == MAX_REJECT_ROWS
    assert all(len(r.reason) <= MAX_REASON_CHARS + 20 for r in out.rejects)
    assert out.rejects[-1].reason.startswith(f"invalid record ({101 - MAX_REJECT_ROWS + 1} other")
    assert out.ack is not None
    assert {seq for a, b, _ in out.ack.rejected for seq in range(a, b + 1)} == set(range(1, 102))


@pytest.mark.parametrize(
    ("ts", "why"),
    [("9999-12-31T23:59:59-23:59", "outside 1970-2100"),
     ("0001-01-01T00:00:00+14:00", "outside 1970-2100")],
)
def test_times_no_formatter_could_write_are_refused_at_intake(ts: str, why: str) -> None:
    out = prepare(TOPIC, _envelope([{**speed(V1, "a1", 1), "ts": ts}], compress=False), _known, T0)
    assert out.rows == []
    assert why in out.rejects[0].reason


def test_a_string_with_nul_is_refused_not_left_to_the_store() -> None:
    out = prepare(TOPIC, _envelope([{**speed(V1, "a1", 1), "note": "a\x00b"},
                                    {**speed(V1, "a1", 2), "note": "a\\u0000b"}],
                                   compress=False), _known, T0)
    assert [row[2] for row in out.rows] == [2]  # the second holds a backslash, not a NUL
    assert "U+0000" in out.rejects[0].reason


# --- device decoders --------------------------------------------------------------------------

def _seeds(name: str) -> list[bytes]:
    """Valid wire bytes of each shipped device (for mutation); [] for a device found as a plugin."""
    if name == "registrador":
        from protocols.registrador import Slot
        from protocols.registrador.encoder import (
            encode_device_event,
            encode_history_end,
            encode_history_record,
            encode_status,
            encode_trip,
        )

        status = encode_status(7, T0, kmh=80.5, odometer_m=1000, ignition=True,
                               slot1=Slot("04512345678", "drive"))
        return [status + encode_device_event(8, T0 + 1000, event="tamper")
                + encode_trip(9, T0 + 2000, event="start", trip="T-1", line="SP-0401",
                              scheduled_ms=T0)
                + encode_history_record(1, T0 + 3000, status)
                + encode_history_end(1, T0 + 3000, first=7, last=7, sent=1, oldest=1)]
    if name == "nmea":
        from simulators.gps import GpsFix, epoch_sentences

        fix = GpsFix(lat=-23.5, lon=-46.6, kmh=60.0, course=90.0)
        return [b"".join(epoch_sentences(T0, fix) + epoch_sentences(T0 + 1000, fix))]
    if name == "apc":
        from protocols.apc.frames import DoorCounts, encode_counts, encode_request

        return [encode_request(1) + encode_counts(1, DoorCounts(open=True, entered=3, exited=1))]
    if name == "fms":
        from protocols.fms import encode_td
        from protocols.fms.candump import format_line

        return ["\n".join(format_line(encode_td(T0 + n * 1000)) for n in range(3)).encode()
                + b"\n"]
    return []


@st.composite
def _wire(draw: st.DrawFn, name: str) -> list[bytes]:
    """The input of one capture, in the chunks it arrives in."""
    seeds = _seeds(name)
    mutate: bool = bool(seeds) and draw(st.booleans())
    data: bytes = draw(_mutated(seeds)) if mutate else draw(st.binary(max_size=600))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=5)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


@pytest.mark.parametrize("name", registry.names())
def test_decoders_take_anything(name: str) -> None:
    @FUZZ
    @given(chunks=_wire(name))
    def run(chunks: list[bytes]) -> None:
        decoder = registry.get(name).make_decoder(V1)
        decoder.set_time(T0)
        records = [rec for chunk in chunks for rec in decoder.feed(chunk)]
        records += decoder.finish()
        assert all(isinstance(rec, dict) for rec in records)
        decoder.stats.summary()

    run()


def test_a_history_answer_holding_a_frame_of_the_wrong_length() -> None:
    # Inside a history record (type 0x81) a status frame (type 0x01, 30 payload bytes per
    # firmware-notes/registrador.md) of 4 payload bytes with a good CRC: malformed, not struct.error.
    from protocols.registrador import frames as f
    from protocols.registrador.decoder import RegistradorDecoder
    from protocols.registrador.encoder import encode_frame, encode_history_record

    inner = encode_frame(f.STATUS, 5, T0, b"\x00\x01\x02\x03")
    decoder = RegistradorDecoder(V1)
    assert decoder.feed(encode_history_record(1, T0, inner)) == []
    assert decoder.stats.malformed == 1


def test_a_registrador_frame_dated_after_2100_is_malformed() -> None:
    from protocols.registrador.decoder import MAX_CLOCK_MS, RegistradorDecoder
    from protocols.registrador.encoder import encode_status

    decoder = RegistradorDecoder(V1)
    last = encode_status(1, MAX_CLOCK_MS, kmh=1.0, odometer_m=0, ignition=True)
    later = encode_status(2, MAX_CLOCK_MS + 1, kmh=1.0, odometer_m=0, ignition=True)
    assert {r["ts"] for r in decoder.feed(last + later)} == {"2100-12-31T23:59:59.999Z"}
    assert decoder.stats.malformed == 1


def test_an_nmea_epoch_is_capped() -> None:
    # One time of day repeated by GGA sentences that never complete the epoch (no RMC).
    from protocols.nmea import MAX_EPOCH_SENTENCES, NmeaDecoder
    from simulators.gps import GpsFix, epoch_sentences

    gga = [s for s in epoch_sentences(T0, GpsFix(lat=-23.5, lon=-46.6)) if s[3:6] == b"GGA"]
    decoder = NmeaDecoder(V1)
    decoder.feed(gga[0] * 10_000)
    epoch = decoder._epoch
    assert epoch is not None
    assert len(epoch.lines) == MAX_EPOCH_SENTENCES


def test_decoded_wire_records_validate() -> None:
    """What the seeds decode to is valid (the fuzz above checks only that nothing escapes)."""
    for name in registry.names():
        decoder = registry.get(name).make_decoder(V1)
        decoder.set_time(T0)
        for seed in _seeds(name):
            for rec in [*decoder.feed(seed), *decoder.finish()]:
                validate(rec)
