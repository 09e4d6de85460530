"""Numbers a person can read: figures to significant digits, durations in the unit that fits.

Every text output (the placement, the offers, the report, the plan's cost) formats its numbers here,
so that a small run reads `0.0147` and `40.2 s` rather than `0.01` and `0.00 h`, and a large one
`15.6` and `13.4 h`. JSON output keeps the full numbers; only text is rounded.

    sig(0.014712)     -> "0.0147"      three significant digits, trailing zeros dropped
    sig(15.64)        -> "15.6"
    sig(43.01)        -> "43"
    sig(2000)         -> "2,000"       integer digits are never dropped
    sig(0.00001)      -> "1e-05"       below 1e-4: an exponent
    money(26.775)     -> "26.8"        a cost or price: `sig`, or "unbounded"
    seconds(42.14)    -> "42.1 s"      the unit that fits: s, min, h, days
    hours(0.0111)     -> "40.0 s"      a duration given in hours, in the unit that fits

Standard library only.
"""

from __future__ import annotations

import math
from typing import Final

#: the digits every figure keeps unless asked otherwise
DIGITS: Final = 3
#: below this magnitude a figure is written with an exponent (1.00e-05)
_TINY: Final = 1e-4


def sig(value: float, digits: int = DIGITS, *, zeros: bool = False) -> str:
    """`value` to `digits` significant digits; integer digits are kept (12,345 stays 12,345).

    Trailing zeros are dropped (43.0 -> 43) unless `zeros` (table columns keep them: 43.0, 13.0)."""
    if not math.isfinite(value):
        return "unbounded" if value > 0 else "-unbounded" if value < 0 else "nan"
    if value == 0:
        return "0"
    value = round(value, 12)  # float noise (26.774999...) must not decide the last digit
    magnitude = abs(value)
    if magnitude < _TINY:
        return f"{value:.{digits}g}"
    exponent = math.floor(math.log10(magnitude))
    decimals = max(0, digits - 1 - exponent)
    rounded = round(value, decimals)
    if rounded != 0 and math.floor(math.log10(abs(rounded))) > exponent:  # 0.9996 -> 1.00, not 1.000
        decimals = max(0, decimals - 1)
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text and not zeros else text


def money(value: float, *, zeros: bool = False) -> str:
    """A cost or a price for reading: significant digits, or 'unbounded'."""
    return sig(value, zeros=zeros)


def percent(share: float) -> str:
    """A share as a percentage with significant digits: 0.0327 -> 3.27%, 0.5 -> 50.0%."""
    return f"{sig(share * 100)}%" if math.isfinite(share) else "-"


def seconds(value: float | None) -> str:
    """A duration in the unit that reads best: 0.0412 s, 0.4 s, 42.1 s, 3.5 min, 2.4 h, 3.2 days."""
    if value is None or not math.isfinite(value):
        return "-" if value is None or math.isnan(value) else "unbounded"
    size = abs(value)
    if size < 0.1:
        return f"{sig(value)} s"
    if size < 120:
        return f"{value:.1f} s"
    if size < 7200:
        return f"{sig(value / 60)} min"
    if size < 7 * 86400:
        return f"{sig(value / 3600)} h"
    return f"{sig(value / 86400)} days"


def hours(value: float | None) -> str:
    """A duration given in hours, in the unit that fits it (see `seconds`)."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return "unbounded"
    return seconds(value * 3600.0)
