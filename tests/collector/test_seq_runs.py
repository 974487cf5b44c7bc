"""An agent's seqs in a bundle kept as runs (collector/bundle_links.py ``SeqRuns``): the same
answers as the set of seqs, in a few pairs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from collector.bundle_links import SeqRuns


def _of(seqs: list[int]) -> SeqRuns:
    runs = SeqRuns()
    for seq in seqs:
        runs.add(seq)
    return runs


def test_a_catch_up_breaks_one_run_in_three() -> None:
    # live frames 1-5, then the catch-up's (later seqs 9-10, older times: first in the
    # bundle's (ts, seq) order), then live 6-8 — seqs in the order a bundle reads them
    runs = _of([9, 10, 1, 2, 3, 4, 5, 6, 7, 8])
    assert len(runs) == 10
    assert runs._sorted() == ([1], [10])  # merged: one run
    runs = _of([1, 2, 3, 20, 21, 4, 5])
    assert len(runs) == 7
    assert [s in runs for s in (0, 1, 5, 6, 19, 20, 21, 22)] == [
        False, True, True, False, False, True, True, False]
    assert list(runs.missing(1, 21)) == list(range(6, 20))
    assert list(runs.missing(0, 30)) == [*range(6, 20), *range(22, 30)]
    assert list(SeqRuns().missing(3, 7)) == [4, 5, 6]
    assert "5" not in runs


@given(st.lists(st.integers(min_value=0, max_value=60), max_size=80),
       st.integers(min_value=-2, max_value=62), st.integers(min_value=-2, max_value=62))
def test_the_same_answers_as_a_set(seqs: list[int], first: int, last: int) -> None:
    runs, kept = _of(seqs), set(seqs)
    assert len(runs) == len(kept)
    assert all((s in runs) == (s in kept) for s in range(-3, 64))
    assert list(runs.missing(first, last)) == [s for s in range(first + 1, last) if s not in kept]
