"""The standard normal's CDF and inverse CDF as scipy.special computes them, without importing it (0.2-0.6 s
on every release that needs one of them).

``ndtr`` and ``ndtri`` evaluate Cephes' rational approximations (S. L. Moshier's Cephes library, which
``scipy.special`` runs) with the same coefficients, the same order of floating-point operations and the C
library's exp and log, so they return scipy's values bit for bit (``tests/privacy/test_normal.py`` checks that over
their whole range): DPNE's thresholds and pass probabilities, which a release publishes and its ledger records,
are the ones it computed with scipy, to the last bit; so are the Gaussian calibration's (``privrelease.core.privacy.budget``).
"""

from __future__ import annotations

import math

import numpy as np

_SQRT1_2 = 0.70710678118654752440  # 1/sqrt(2), C's M_SQRT1_2
_MAXLOG = 7.09782712893383996843e2  # log(DBL_MAX)
_S2PI = 2.50662827463100050242e0  # sqrt(2 pi)
_EXP_M2 = 0.13533528323661269189  # exp(-2)

# Cephes' coefficients (Q's, S's and U's leading 1 left out). ndtri: P0/Q0 in (p - 1/2)^2 for |p - 1/2| <= 3/8,
# P1/Q1 in 1/z for z = sqrt(-2 log p) in [2, 8), P2/Q2 in 1/z for z >= 8. ndtr: erfc's P/Q for x in [1, 8),
# R/S for x >= 8; erf's T/U in x^2 for |x| < 1.
_C = {
    "P0": (-5.99633501014107895267e1, 9.80010754185999661536e1, -5.66762857469070293439e1, 1.39312609387279679503e1,
           -1.23916583867381258016e0),
    "Q0": (1.95448858338141759834e0, 4.67627912898881538453e0, 8.63602421390890590575e1, -2.25462687854119370527e2,
           2.00260212380060660359e2, -8.20372256168333339912e1, 1.59056225126211695515e1, -1.18331621121330003142e0),
    "P1": (4.05544892305962419923e0, 3.15251094599893866154e1, 5.71628192246421288162e1, 4.40805073893200834700e1,
           1.46849561928858024014e1, 2.18663306850790267539e0, -1.40256079171354495875e-1,
           -3.50424626827848203418e-2, -8.57456785154685413611e-4),
    "Q1": (1.57799883256466749731e1, 4.53907635128879210584e1, 4.13172038254672030440e1, 1.50425385692907503408e1,
           2.50464946208309415979e0, -1.42182922854787788574e-1, -3.80806407691578277194e-2,
           -9.33259480895457427372e-4),
    "P2": (3.23774891776946035970e0, 6.91522889068984211695e0, 3.93881025292474443415e0, 1.33303460815807542389e0,
           2.01485389549179081538e-1, 1.23716634817820021358e-2, 3.01581553508235416007e-4,
           2.65806974686737550832e-6, 6.23974539184983293730e-9),
    "Q2": (6.02427039364742014255e0, 3.67983563856160859403e0, 1.37702099489081330271e0, 2.16236993594496635890e-1,
           1.34204006088543189037e-2, 3.28014464682127739104e-4, 2.89247864745380683936e-6,
           6.79019408009981274425e-9),
    "P": (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0, 4.86371970985681366614e1,
           1.96520832956077098242e2, 5.26445194995477358631e2, 9.34528527171957607540e2, 1.02755188689515710272e3,
           5.57535335369399327526e2),
    "Q": (1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2, 9.75708501743205489753e2,
           1.82390916687909736289e3, 2.24633760818710981792e3, 1.65666309194161350182e3, 5.57535340817727675546e2),
    "R": (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0, 6.16021097993053585195e0,
           7.40974269950448939160e0, 2.97886665372100240670e0),
    "S": (2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1, 1.70814450747565897222e1,
           9.60896809063285878198e0, 3.36907645100081516050e0),
    "T": (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3, 7.00332514112805075473e3,
           5.55923013010394962768e4),
    "U": (3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3, 2.26290000613890934246e4,
           4.92673942608635921086e4),
}  # fmt: skip


def ndtr(x: float) -> float:
    """Phi(x), as scipy.special.ndtr computes it (Cephes: erf's rational function for |x| < sqrt 2, else erfc's
    times exp(-x^2/2), the C library's exp): DPNE's pass probabilities, which its accuracy figures publish, and the
    Gaussian calibration's delta (``privrelease.core.privacy.budget``)."""
    x = x * _SQRT1_2
    z = abs(x)
    if z < 1.0:
        return 0.5 + 0.5 * _erf(x)
    y = 0.5 * _erfc(z)
    return 1.0 - y if x > 0 else y


def _erf(x: float) -> float:
    """erf(x) for |x| <= 1 (``ndtr`` calls it only there)."""
    z = x * x
    return x * _polevl(z, _C["T"]) / _p1evl(z, _C["U"])


def _erfc(x: float) -> float:
    """erfc(x) for x >= 1 (``ndtr`` calls it only there): 0 where exp(-x^2) underflows."""
    z = -x * x
    if z < -_MAXLOG:
        return 0.0
    p, q = (_polevl(x, _C["P"]), _p1evl(x, _C["Q"])) if x < 8.0 else (_polevl(x, _C["R"]), _p1evl(x, _C["S"]))
    return (math.exp(z) * p) / q


def ndtri(p: np.ndarray | float) -> np.ndarray:
    """Phi^-1(p) elementwise for 0 < p < 1 (-inf at 0, inf at 1, nan outside [0, 1]): scipy.special.ndtri's
    values exactly. The logarithms are the C library's (``math.log``), as in Cephes: numpy's vectorized
    log may differ from it in the last bit."""
    p = np.asarray(p, dtype=float)
    flat = p.reshape(-1)
    out = np.full(flat.shape, np.nan)
    upper = flat > 1.0 - _EXP_M2
    y = np.where(upper, 1.0 - flat, flat)  # the lower tail: the sign is restored at the end
    centre = (y > _EXP_M2) & (flat < 1.0)
    w = y[centre] - 0.5
    w2 = w * w
    out[centre] = (w + w * (w2 * _polevl(w2, _C["P0"]) / _p1evl(w2, _C["Q0"]))) * _S2PI
    tail = np.flatnonzero(~centre & (flat > 0.0) & (flat < 1.0))
    x = np.sqrt(-2.0 * _log(y[tail]))
    x0 = x - _log(x) / x
    z = 1.0 / x
    near = x < 8.0
    x1 = np.where(near, z * _polevl(z, _C["P1"]) / _p1evl(z, _C["Q1"]), z * _polevl(z, _C["P2"]) / _p1evl(z, _C["Q2"]))
    out[tail] = np.where(upper[tail], x0 - x1, -(x0 - x1))
    out[flat == 0.0], out[flat == 1.0] = -np.inf, np.inf
    return out.reshape(p.shape)


def _log(x: np.ndarray) -> np.ndarray:
    return np.fromiter((math.log(v) for v in x.tolist()), dtype=float, count=x.size)


def _polevl(x, coefficients: tuple[float, ...]):  # x a float or an array of them
    """c0 x^n + ... + cn by Horner's rule, in Cephes' order of operations."""
    total = coefficients[0]
    for c in coefficients[1:]:
        total = total * x + c
    return total


def _p1evl(x, coefficients: tuple[float, ...]):
    """x^(n+1) + c0 x^n + ... + cn (a leading coefficient of 1), in Cephes' order of operations."""
    total = x + coefficients[0]
    for c in coefficients[1:]:
        total = total * x + c
    return total


def log_ndtr(x: float) -> float:
    """log Phi(x): log of ``ndtr`` while it stays a normal float (x >= -37), below that its asymptotic series
    log(phi(x) / -x) + log(1 - 1/x^2 + 3/x^4 - ...), alternating, to its first omitted term (< 1e-17 there)."""
    if x >= -37.0:
        return math.log(ndtr(x))
    inv, term, total = 1 / (x * x), 1.0, 1.0
    for k in range(1, 8):
        term *= -(2 * k - 1) * inv
        total += term
    return -0.5 * x * x - math.log(-x) - _LOG_SQRT_2PI + math.log(total)


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
