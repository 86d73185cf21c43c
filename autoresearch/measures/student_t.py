"""Student's t distribution: the tail and the quantile the speed verdict's intervals and tests need.

Why here and not a dependency: the GPU machine's kit carries no SciPy (35 MB a call), and the verdict needs two
functions: P(T > t) through the regularized incomplete beta function (its continued fraction, modified Lentz), and
its inverse by bisection. Checked against the tables in tests/autoresearch/test_speed_verdict.py.
"""

from __future__ import annotations

import functools
import math

__all__ = ["t_ppf", "t_sf"]


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, for 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom (df > 0): a one-sided p-value."""
    if not df > 0:
        raise ValueError(f"Student's t needs df > 0, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


@functools.lru_cache(maxsize=4096)
def t_ppf(q: float, df: float) -> float:
    """The quantile of Student's t: the t with P(T <= t) = q (0 < q < 1), by bisection on t_sf (cached: a verdict
    asks the same few levels and degrees of freedom again and again)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"a quantile needs 0 < q < 1, got {q}")
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > 1.0 - q:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_sf(mid, df) > 1.0 - q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0
