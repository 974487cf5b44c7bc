"""Durations shown to people: days and hours, not 23,681,280 s (issue 14 item 5)."""

from __future__ import annotations

import pytest

from agent.durations import human_duration


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (2.5, "2.5 s"),
        (45, "45 s"),
        (119, "119 s"),
        (120, "2 min"),
        (3599, "60 min"),
        (7200, "2.0 h"),
        (86_400, "24.0 h"),
        (172_800, "2 d"),
        (23_681_280, "274 d 2 h"),  # 274 × 86400 = 23,673,600; 7,680 s left = 2 h 8 min
        (94_608_000, "1095 d"),  # 3 × 365 days
        (94_607_999.9, "1095 d"),  # a measured step a hair short of it: to the nearest hour
        (2 * 86_400 + 5_500, "2 d 2 h"),  # 1.53 h rounds to 2 h
        (-3600, "-60 min"),
    ],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text
