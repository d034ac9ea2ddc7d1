"""The memory budget of one program: what a sweep batch or a round's cohort may use."""

from __future__ import annotations

import os

import jax


def memory_budget() -> int:
    """Bytes a program may use: 60% of the accelerator's limit, else 40% of free RAM."""
    try:
        st = jax.devices()[0].memory_stats()
        if st and st.get("bytes_limit"):
            return int(0.6 * st["bytes_limit"])
    except Exception:  # noqa: BLE001 - backends without memory stats
        pass
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return int(0.4 * free)
    except (ValueError, OSError):
        return 4 << 30
