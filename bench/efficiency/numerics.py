"""What besides the code and the libraries' versions decides a study's trials: the CPU's SIMD.

NumPy 1.x computes float64 `exp` and `log` with vector code of its own on a CPU with AVX512F
(and more functions through SVML with AVX512_SKX), and with the C library's element by element
elsewhere; the two differ in the last bit now and then. Optuna's TPE weighs every candidate
with them, so after a few dozen trials a last bit tips one comparison and the studies part:
the same code, libraries and seed gave other trials on an AVX512F machine (2026-12-03,
bench/BENCHMARKS.md "The same seed on another CPU"), and gave the other machine's trials again
with NumPy's AVX512 switched off (``NPY_DISABLE_CPU_FEATURES``). So the efficiency benches'
cache keys hold `numpy_simd()` besides the versions.

Example::

    >>> numpy_simd() in ("", "AVX512F", "AVX512F AVX512_SKX")
    True
"""

from __future__ import annotations

__all__ = ["FEATURES", "numpy_simd"]

FEATURES = ("AVX512F", "AVX512_SKX")
"""The NumPy dispatch targets whose float64 math differs from the C library's."""


def numpy_simd() -> str:
    """The `FEATURES` NumPy dispatches to in this process, space-separated ("" where it uses none:
    a CPU without them, or switched off by ``NPY_DISABLE_CPU_FEATURES``)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:
        try:
            from numpy.core._multiarray_umath import __cpu_features__
        except ImportError:
            return ""
    return " ".join(f for f in FEATURES if __cpu_features__.get(f))
