"""Every date or time a person or a program types into the pages and the API (6e82d9e day
bounds, 939343a findings since/until as dates), hostile: the calendar's ends, days that do not
exist, offsets, fractions, other digits, NUL, long text. Each is an answer (200, or a 4xx
saying why), never a 500 — and a date given to ``/findings`` means that local day's first
instant, as an RFC 3339 time of that instant does."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.pages.conftest import Server
from tests.pages.test_pages_http import login

HOSTILE = [
    "0001-01-01", "0001-01-02", "1969-12-31", "1970-01-01", "1970-01-02", "2100-12-31",
    "2101-01-01", "9999-12-30", "9999-12-31", "10000-01-01", "0000-01-01", "2026-02-29",
    "2028-02-29", "2026-13-01", "2026-03-32", "2026-3-2", "20260302", "2026-03-02 ",
    " 2026-03-02", "2026-03-02T00:00:00Z", "2026-03-02T03:00:00-03:00", "2026-03-02T24:00:00Z",
    "2026-03-02T23:59:60Z", "2026-03-02T00:00:00.999999999Z", "2026-03-02T00:00:00+99:00",
    "9999-12-31T23:59:59Z", "0001-01-01T00:00:00+14:00", "２０２６-03-02", "2026-03-02\x00",
    "-1", "1e400", "NaN", "", "x" * 300, "2026-03-02/2026-03-03",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_no_typed_date_is_a_server_error(server: Server, value: str) -> None:
    token = server.token("fiscal")
    q = quote(value, safe="")
    for path in (f"/findings?since={q}", f"/findings?until={q}&vehicle=FRT1A01",
                 f"/findings?since={q}&until={q}",
                 f"/vehicles/FRT1A01/days/{q}", f"/drivers/D-1001/days/{q}",
                 f"/vehicles/FRT1A01/bundle?since={q}&until=2026-03-03",
                 f"/vehicles/FRT1A01/bundle?since=2026-03-02&until={q}"):
        response = server.get(path, token)
        assert response.status_code < 500, (path, response.status_code, response.text[:200])
    with login(server, token) as client:
        for path in (f"/disco/FRT1A01?dia={q}", f"/disco/FRT1A01/pacote?dia={q}",
                     f"/jornada/D-1001?dia={q}", f"/jornada?condutor=D-1001&dia={q}",
                     f"/ocorrencias?de={q}", f"/ocorrencias?ate={q}&veiculo=FRT1A01"):
            response = client.get(path)
            assert response.status_code < 500, (path, response.status_code, response.text[:200])


def test_a_date_is_the_local_days_first_instant(server: Server) -> None:
    """FRT2B02 keeps America/Sao_Paulo (UTC-3 in March 2026): since=2026-03-03 is
    2026-03-03T03:00:00Z, and until alike."""
    token = server.token("fiscal")
    for since, until in (("2026-03-03", "2026-03-04"), ("2026-03-02", "2026-03-03"),
                         ("2026-03-01", "2026-04-02")):
        by_date = server.get(f"/findings?vehicle=FRT2B02&since={since}&until={until}", token)
        by_time = server.get(
            f"/findings?vehicle=FRT2B02&since={since}T03:00:00Z&until={until}T03:00:00Z", token)
        assert by_date.status_code == by_time.status_code == 200
        assert by_date.json() == by_time.json()
    day = server.get("/findings?vehicle=FRT2B02&since=2026-03-03&until=2026-03-04",
                     token).json()["findings"]
    assert day  # the breakdown's day has findings


def test_a_fiscal_read_is_logged_on_one_line_whatever_its_path(
        server: Server, caplog: pytest.LogCaptureFixture) -> None:
    """The audit of a fiscal's reads (1598d5e) cannot be forged by the fiscal: a path with a
    newline or another control character (percent-encoded in the request, decoded in the path)
    is logged escaped, one line a read."""
    fiscal = server.token("fiscal")
    forged = "fiscal read: token someone-else from 10.0.0.1: GET x"
    with caplog.at_level("INFO", logger="collector.http"):
        for sep in ("%0A", "%0D", "%1B%5B2K", "%E2%80%A8"):
            path = f"/vehicles/FRT1A01/days/2026-03-02{sep}{quote(forged, safe='')}"
            assert server.get(path, fiscal).status_code < 500
            assert server.get(f"/findings?since=2026-03-02{sep}x", fiscal).status_code < 500
    reads = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fiscal read")]
    assert len(reads) == 8
    for message in reads:
        assert message.isprintable(), message
    # the terminal escape (ESC [2K: erase the line) as it was sent
    assert reads[4] == ("fiscal read: token {id} from 127.0.0.1: GET /vehicles/FRT1A01/days/"
                        "2026-03-02%1B%5B2Kfiscal%20read:%20token%20someone-else%20from%2010.0.0.1:"
                        "%20GET%20x").format(id=fiscal.split("_")[1])
