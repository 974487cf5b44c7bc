"""The digital disc codec (issue 15 item 6): a vehicle-day's records decode back byte for byte,
the chain's ``prev`` included, and take far fewer bytes than their JSON."""

from __future__ import annotations

import orjson
import pytest

from collector.disc import decode_day, encode_day
from protocols.chain import GENESIS, record_hash
from protocols.records import make_record, ms_to_ts, ts_to_ms

T0 = ts_to_ms("2026-11-20T09:00:00Z")


def chained_day(count: int) -> list[str]:
    """``count`` seconds of a bus at 1 Hz: a registrador speed sample (frame n, raw bytes) and a
    GPS position each second, chained by ``prev`` as the agent does; texts as the store keeps
    them."""
    prev = GENESIS
    texts = []
    seq = 0
    for n in range(count):
        ts = ms_to_ts(T0 + n * 1000)
        for rec in (
            make_record("speed", "ABC1D23", ts, kmh=float(60 + n % 7), odometer_m=1000 + 17 * n,
                        ignition=True, device_seq=n + 1, raw=f"aa5510{n % 256:02x}00ff"),
            make_record("position", "ABC1D23", ts, lat=-23.5 + n * 1e-5, lon=-46.6,
                        kmh=60.004 + n % 5, course=90.0),
        ):
            seq += 1
            rec = {**rec, "agent": "9b2f0c4e", "seq": seq, "prev": prev}
            prev = record_hash(rec)
            texts.append(orjson.dumps(rec).decode())
    return sorted(texts, key=lambda t: (orjson.loads(t)["ts"], orjson.loads(t)["seq"]))


def test_a_day_decodes_back_byte_for_byte() -> None:
    texts = chained_day(300)
    blob = encode_day(texts)
    assert decode_day(blob) == texts
    # 600 records of some 200 bytes of JSON each (a 64-hex-digit prev included)
    assert len(blob) / len(texts) <= 8 * 2   # loose here; bench.disc measures the target


def test_a_broken_chain_keeps_its_prev_and_odd_texts_stay_verbatim() -> None:
    texts = chained_day(5)
    forged = orjson.loads(texts[3])
    forged["prev"] = "f" * 64                          # not the hash of the record before it
    texts[3] = orjson.dumps(forged).decode()
    texts.append('{"vehicle": "ABC1D23", "kind":"speed"}')   # spaced: not orjson's form
    texts.append('{"vehicle":"ABC1D23","ts":"2026-11-20T09:00:00.5Z","kind":"x","n":true,'
                 '"m":null,"o":{"a":[1,2]},"kmh":61}')        # ts not canonical; nested; mixed
    assert decode_day(encode_day(texts)) == texts


def test_not_a_blob_is_refused() -> None:
    with pytest.raises(ValueError, match="not a frota disc blob"):
        decode_day(b"\x07junk")


def test_a_day_whose_hash_needs_the_general_canonical_form_decodes_back() -> None:
    # kmh 61.123 is rounded to 61.12 in the canonical form (0.01 km/h, docs/records.md), so the
    # fast hash (sorted JSON as it is) would be another: the decoder must rebuild each prev with
    # the general one, and the chain after the record stays whole
    prev = GENESIS
    texts = []
    for n, kmh in enumerate([60.0, 61.123, 62.5, 1e-6 * 3]):
        rec = {**make_record("speed", "ABC1D23", ms_to_ts(T0 + n * 1000), kmh=kmh),
               "agent": "a", "seq": n + 1, "prev": prev}
        prev = record_hash(rec)
        texts.append(orjson.dumps(rec).decode())
    assert decode_day(encode_day(texts)) == texts


def _registrador_day() -> list[dict[str, object]]:
    """Records of 6 registrador status frames as the agent's decoder makes them (frames built
    by the protocol's encoder): a driver in slot 1 from frame 1, a second card in frame 4."""
    from protocols.registrador.encoder import Slot, encode_status
    from protocols.registry import get

    decoder = get("registrador").make_decoder("ABC1D23")
    out: list[dict[str, object]] = []
    for n in range(1, 7):
        slot2 = Slot("04599999999", "work") if n >= 4 else Slot()
        frame = encode_status(n, T0 + n * 1000, kmh=60.0 + n / 4, odometer_m=1000 + 17 * n,
                              ignition=n != 5, slot1=Slot("04512345678", "drive"), slot2=slot2)
        out += [dict(r) for r in decoder.feed(frame)]
    return out


def test_frames_the_encoder_rebuilds_are_dropped_odd_ones_kept_verbatim() -> None:
    from collector import disc_raw
    from collector.disc import RAW_FLAGS, _drop_raw

    recs = _registrador_day()
    assert [r["kind"] for r in recs][:3] == ["speed", "driver", "driver"]  # frame 1: 3 records
    corrupt = next(i for i, r in enumerate(recs) if r["kind"] == "speed" and r["device_seq"] == 3)
    raw = str(recs[corrupt]["raw"])
    recs[corrupt]["raw"] = raw[:-4] + ("0000" if raw[-4:] != "0000" else "ffff")  # bad CRC
    odd = next(i for i, r in enumerate(recs) if r["kind"] == "speed" and r["device_seq"] == 6)
    recs[odd]["raw"] = str(recs[odd]["raw"]).upper()          # not the canonical hex
    prev, texts = GENESIS, []
    for seq, rec in enumerate(recs, 1):
        rec = {**rec, "agent": "a", "seq": seq, "prev": prev}
        prev = record_hash(rec)
        texts.append(orjson.dumps(rec).decode())
    assert decode_day(encode_day(texts)) == texts
    parsed = [orjson.loads(t) for t in texts]
    flags = _drop_raw(parsed, {"raw": [r["raw"] for r in parsed]})
    how = {(r["kind"], r["device_seq"], r.get("slot")): h
           for r, h in zip(parsed, flags, strict=True)}
    # frame 1 starts the day: kept; its driver records repeat it
    assert how[("speed", 1, None)] == disc_raw.NONE
    assert how[("driver", 1, 1)] == disc_raw.REPEAT
    assert how[("speed", 2, None)] == disc_raw.STATUS       # rebuilt from frame 1
    assert how[("speed", 3, None)] == disc_raw.NONE         # the corrupt CRC: kept verbatim
    assert how[("speed", 4, None)] == disc_raw.NONE         # a card entered slot 2: kept
    assert how[("speed", 5, None)] == disc_raw.STATUS       # ignition off: rebuilt
    assert how[("speed", 6, None)] == disc_raw.NONE         # upper-case hex: kept as written
    assert RAW_FLAGS.startswith("\x00")
