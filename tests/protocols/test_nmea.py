"""NMEA decoder: hand-worked sentences (firmware-notes/nmea.md), framing, bad input, invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols import registry
from protocols.nmea import NmeaDecoder, SentenceRejected, checksum, parse_sentence
from protocols.records import Record, validate

# The worked examples of firmware-notes/nmea.md (checksums as laid out there).
RMC = b"$GPRMC,142305.00,A,2330.9780,S,04637.5120,W,48.6,271.3,020326,,,A*6C"
VTG = b"$GPVTG,271.3,T,,M,48.6,N,90.0,K,A*09"
GGA = b"$GPGGA,142305.00,2330.9780,S,04637.5120,W,1,09,0.9,760.2,M,-5.1,M,,*7C"
RMC_VOID = b"$GPRMC,142306.00,V,,,,,,,020326,,,N*7A"
GGA_VOID = b"$GPGGA,142305.00,2330.9780,S,04637.5120,W,0,00,99.9,,M,,M,,*6E"
RMC_MIDNIGHT = b"$GNRMC,235959.00,A,1258.4500,S,03830.6000,W,0.0,,020326,,,A*64"
GGA_NEXT_DAY = b"$GNGGA,000000.00,1258.4500,S,03830.6000,W,1,12,0.8,12.0,M,-10.0,M,,*68"
CRLF = b"\r\n"


def lines(*sentences: bytes) -> bytes:
    """Sentences as a receiver sends them, each ending in CR LF."""
    return b"".join(s + CRLF for s in sentences)


def decode(data: bytes, chunk: int | None = None) -> tuple[list[Record], NmeaDecoder]:
    """Decode a whole capture (optionally in chunks) and check every record."""
    decoder = NmeaDecoder("ABC1D23")
    out: list[Record] = []
    step = chunk or max(len(data), 1)
    for i in range(0, len(data), step):
        out += decoder.feed(data[i : i + step])
    out += decoder.finish()
    for rec in out:
        validate(rec)
        assert -90 <= rec["lat"] <= 90
        assert rec.get("kmh", 0) >= 0
    return out, decoder


def without_raw(rec: Record) -> Record:
    return {k: v for k, v in rec.items() if k != "raw"}


SAO_PAULO = {
    "vehicle": "ABC1D23",
    "ts": "2026-03-02T14:23:05.000Z",
    "kind": "position",
    "lat": -23.5163,  # -(23 + 30.9780/60)
    "lon": -46.6252,  # -(46 + 37.5120/60)
    "kmh": 90.01,  # 48.6 kn x 1.852 = 90.0072
    "course": 271.3,
}


def test_checksum_worked_by_hand() -> None:
    assert checksum(b"GPVTG,,T,,M,0.0,N,0.0,K,N") == 0x2C


def test_rmc_vtg_gga_of_one_epoch_give_one_record() -> None:
    out, decoder = decode(lines(RMC, VTG, GGA))
    assert [without_raw(r) for r in out] == [SAO_PAULO]
    assert bytes.fromhex(out[0]["raw"]) == lines(RMC, VTG, GGA)
    assert decoder.stats.frames == 3


def test_rmc_alone_is_emitted_when_the_next_epoch_starts() -> None:
    decoder = NmeaDecoder("ABC1D23")
    assert decoder.feed(lines(RMC)) == []
    out = decoder.feed(lines(RMC_VOID))
    assert [without_raw(r) for r in out] == [SAO_PAULO]


def test_raw_replays_to_the_same_record() -> None:
    out, _ = decode(lines(RMC, VTG, GGA))
    again, _ = decode(bytes.fromhex(out[0]["raw"]))
    assert again == out


def test_void_fixes_give_no_position() -> None:
    out, decoder = decode(lines(RMC_VOID, GGA_VOID))
    assert out == []
    assert decoder.stats.void_fixes == 2


def test_gga_after_midnight_takes_the_next_day() -> None:
    out, _ = decode(lines(RMC_MIDNIGHT, GGA_NEXT_DAY))
    assert [without_raw(r) for r in out] == [
        {"vehicle": "ABC1D23", "ts": "2026-03-02T23:59:59.000Z", "kind": "position",
         "lat": -12.9741667, "lon": -38.51, "kmh": 0.0},  # -(12 + 58.45/60), -(38 + 30.6/60)
        {"vehicle": "ABC1D23", "ts": "2026-03-03T00:00:00.000Z", "kind": "position",
         "lat": -12.9741667, "lon": -38.51},
    ]


def test_gga_before_any_date_is_held_back_and_counted() -> None:
    out, decoder = decode(lines(GGA_NEXT_DAY, RMC_MIDNIGHT))
    assert [r["ts"] for r in out] == ["2026-03-02T23:59:59.000Z"]
    assert decoder.stats.undated == 1


def test_zda_dates_a_gga_only_receiver() -> None:
    zda = b"$GPZDA,000000.00,03,03,2026,00,00*60"
    assert checksum(zda[1:-3]) == 0x60
    out, _ = decode(lines(zda, GGA_NEXT_DAY))
    assert [r["ts"] for r in out] == ["2026-03-03T00:00:00.000Z"]


def test_zda_with_an_impossible_year_is_malformed() -> None:
    body = b"GPZDA,000000.00,03,03,0001,00,00"
    out, decoder = decode(lines(b"$" + body + b"*%02X" % checksum(body), GGA_NEXT_DAY))
    assert out == []
    assert decoder.stats.malformed == 1
    assert decoder.stats.undated == 1


@pytest.mark.parametrize("talker", [b"GP", b"GN", b"GL", b"GA", b"BD", b"GB"])
def test_every_gnss_talker(talker: bytes) -> None:
    body = talker + RMC[3:-3]
    sentence = b"$" + body + b"*%02X" % checksum(body)
    out, _ = decode(lines(sentence))
    assert [without_raw(r) for r in out] == [SAO_PAULO]


# Framing table: (name, capture, records expected, counters expected).
FRAMING = [
    ("clean", lines(RMC, GGA), 1, {"crc_failures": 0, "bytes_dropped": 0}),
    ("garbage before", b"\x00\xff\xb5b" + lines(RMC, GGA), 1, {"bytes_dropped": 4}),
    ("bad checksum then good", lines(RMC[:-2] + b"6D", RMC, GGA), 1, {"crc_failures": 1}),
    ("no checksum", lines(RMC, GGA[:-3]), 1, {"crc_failures": 1}),
    ("lower-case checksum", lines(RMC[:-2] + b"6c", GGA), 1, {"crc_failures": 0}),
    ("lost line end", lines(RMC[:30] + RMC, GGA), 1, {"bytes_dropped": 30}),
    ("LF only", RMC + b"\n" + GGA + b"\n", 1, {"crc_failures": 0}),
    ("unterminated at the end", lines(RMC) + GGA[:20], 1, {"bytes_dropped": 20}),
    ("AIS skipped", lines(b"!AIVDM,1,1,,A,15M67FC000G?ufbE`FepT@3n00Sa,0*5F", RMC), 1, {"skipped": 1}),
    ("proprietary skipped", lines(b"$PGRME,15.0,M,45.0,M,25.0,M*1C", RMC), 1, {"skipped": 1}),
    ("marine skipped", lines(b"$SDDBT,7.8,f,2.4,M,1.3,F*0D", RMC), 1, {"skipped": 1}),
    ("GSV unused", lines(b"$GPGSV,1,1,00*79", RMC), 1, {"unused": 1}),
]


@pytest.mark.parametrize(("name", "data", "count", "counters"), FRAMING, ids=[f[0] for f in FRAMING])
def test_framing(name: str, data: bytes, count: int, counters: dict[str, int]) -> None:
    for chunk in (None, 1, 7):
        out, decoder = decode(data, chunk)
        assert [without_raw(r) for r in out] == [SAO_PAULO] * count, name
        summary = decoder.stats.summary()
        for key, value in counters.items():
            assert summary[key] == value, (name, chunk, key)


def test_hand_checksums_of_the_framing_table() -> None:
    assert checksum(b"GPGSV,1,1,00") == 0x79
    assert checksum(b"SDDBT,7.8,f,2.4,M,1.3,F") == 0x0D
    assert checksum(b"PGRME,15.0,M,45.0,M,25.0,M") == 0x1C
    assert checksum(b"AIVDM,1,1,,A,15M67FC000G?ufbE`FepT@3n00Sa,0") == 0x5F


@pytest.mark.parametrize(
    "body",
    [
        b"GPRMC,142305.00,A,23XX.9780,S,04637.5120,W,48.6,271.3,020326,,,A",  # latitude
        b"GPRMC,142305.00,A,2330.9780,Q,04637.5120,W,48.6,271.3,020326,,,A",  # hemisphere
        b"GPRMC,142305.00,A,2375.0000,S,04637.5120,W,48.6,271.3,020326,,,A",  # minutes >= 60
        b"GPRMC,142305.00,A,2330.9780,S,04637.5120,W,X.6,271.3,020326,,,A",  # speed
        b"GPRMC,142305.00,A,2330.9780,S,04637.5120,W,48.6,-71.3,020326,,,A",  # course
        b"GPRMC,142305.00,A,2330.9780,S,04637.5120,W,48.6,271.3,320326,,,A",  # date
        b"GPRMC,1423,A,2330.9780,S,04637.5120,W,48.6,271.3,020326,,,A",  # time
        b"GPRMC,142305.00,A,,,,,48.6,271.3,020326,,,A",  # valid without a position
        b"GPGGA,142305.00,2330.9780,S,04637.5120,W,x,09,0.9,760.2,M,-5.1,M,,",  # quality
        b"GPGGA,142305.00,9130.9780,S,04637.5120,W,1,09,0.9,760.2,M,-5.1,M,,",  # 91 degrees
    ],
)
def test_malformed_fields_are_counted_not_raised(body: bytes) -> None:
    sentence = b"$" + body + b"*%02X" % checksum(body)
    with pytest.raises(SentenceRejected) as caught:
        parse_sentence(sentence)
    assert caught.value.reason == "malformed"
    out, decoder = decode(lines(sentence))
    assert out == []
    assert decoder.stats.malformed == 1
    assert decoder.stats.rejected[-1][0] == "malformed"


def test_registered_as_nmea() -> None:
    info = registry.get("nmea")
    assert info.name == "nmea"
    assert isinstance(info.make_decoder("X"), NmeaDecoder)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=40), st.sampled_from(
    [RMC, GGA, VTG, RMC_VOID, b"$", b"*", b",", b"\r\n", b"$GPRMC,", b"*6C"])), max_size=30))
def test_never_raises_on_any_bytes(parts: list[bytes]) -> None:
    decode(b"".join(parts), 5)
