"""How a batch of rows is split into multi-row statements (protocols/sqlite_rows.py)."""

from __future__ import annotations

import sqlite3

from protocols.sqlite_rows import rows_per_statement, statements


def test_the_rows_go_in_full_statements_then_powers_of_two() -> None:
    # 300 = 128 + 128 + 32 + 8 + 4
    assert list(statements(300, 128)) == [(0, 128), (128, 128), (256, 32), (288, 8), (296, 4)]
    # 450 = 200 + 200 + 32 + 16 + 2
    assert list(statements(450, 200)) == [(0, 200), (200, 200), (400, 32), (432, 16), (448, 2)]
    assert list(statements(3, 1)) == [(0, 1), (1, 1), (2, 1)]
    assert list(statements(0, 128)) == []


def test_a_statement_holds_no_more_variables_than_sqlite_allows() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        assert rows_per_statement(conn, 14, 128) == 128
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 100)
        assert rows_per_statement(conn, 14, 128) == 7        # 100 // 14
        assert rows_per_statement(conn, 7, 200, shared=1) == 14  # (100 - 1) // 7
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 10)
        assert rows_per_statement(conn, 14, 128) == 1        # never fewer than one row
    finally:
        conn.close()
