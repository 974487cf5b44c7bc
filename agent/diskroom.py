"""Room on the buffer's disk: the reserve file beside the buffer, given back when the disk is full.

On a really full filesystem SQLite cannot even mark records uploaded or delete old ones (the WAL
needs a few pages). The writer keeps a reserve file (``buffer.reserve_mb``) and gives it back
then; it takes it again once there is room (firmware-notes/agent.md, "A full disk").
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def reserve_path(path: Path) -> Path:
    """The reserve file beside the buffer (``buffer.sqlite.reserve``)."""
    return path.with_name(path.name + ".reserve")


def ensure_reserve(path: Path, size: int) -> bool:
    """Create the reserve file of ``size`` bytes if missing; False if the disk has no room.

    On a really full filesystem SQLite cannot even mark records uploaded or delete old ones (the
    WAL needs a few pages): the reserve is given back then (:func:`release_reserve`), and taken
    again once there is room.
    """
    reserve = reserve_path(path)
    if size <= 0 or (reserve.exists() and reserve.stat().st_size >= size):
        return True
    try:
        with reserve.open("wb") as out:
            os.posix_fallocate(out.fileno(), 0, size)
    except OSError:
        with contextlib.suppress(OSError):
            reserve.unlink()
        return False
    return True


def release_reserve(path: Path) -> bool:
    """Delete the reserve file to give SQLite room; True if there was one."""
    try:
        reserve_path(path).unlink()
    except FileNotFoundError:
        return False
    except OSError:
        return False
    return True
