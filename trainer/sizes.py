"""Memory sizes as people write them ("80GB", "24GiB") and as hpsearch prints them, and the
headroom kept free on a device. No torch here: commands parse and print sizes before (or
without) loading it."""

from __future__ import annotations

import re

__all__ = ["HEADROOM", "format_size", "parse_size"]

HEADROOM = 0.10
"""Share of the device kept free of the measured bytes: the CUDA context, library workspaces
and the caching allocator's fragmentation are not tensors, and a dry run does not see them."""

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_size(text: str) -> int:
    """Bytes in a size such as "80GB" (10^9), "24GiB" (2^30), "512 MiB" or "1000000".

    Raises ValueError (one line) for anything else, or a size of zero.
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"{text!r} is not a memory size (e.g. 80GB, 24GiB, 512MiB; GB = 10^9 bytes, GiB = 2^30)"
        )
    size = int(float(match.group(1)) * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"{text!r}: a memory size must be more than 0 bytes")
    return size


def format_size(size: int | None) -> str:
    """Binary units, three significant digits or so: "188 KiB", "9.3 MiB", "1.50 GiB"."""
    if size is None:
        return "-"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(size) >= scale:
            value = size / scale
            digits = 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0
            return f"{value:.{digits}f} {unit}"
    return f"{size} B"
