"""Typed table cells: a count and an interval keep their numbers until a table is written, where `str` formats them.

A report reads these fields (`.k`, `.low`); only a writer (mrl.runtime.results.write_table, a sentence) calls `str`,
so no report parses a cell the package formatted itself.
"""
from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Count:
    """k of n: '2/5' (runs that collapsed of a row's runs)."""
    k: int
    n: int

    def __str__(self) -> str:
        return f"{self.k}/{self.n}"


@dataclasses.dataclass(frozen=True)
class Interval:
    """A paired difference: its mean and 95% interval [low, high] (NaN with one pair) and whether it is real.
    Shown as '+0.123 [+0.050, +0.196]', in bold when real; the mean alone without an interval, '' without a mean."""
    mean: float
    low: float
    high: float
    real: bool = False

    @property
    def bounded(self) -> bool:
        """Whether the cell shows an interval (a mean and both ends)."""
        return not math.isnan(self.mean) and not math.isnan(self.low)

    def __str__(self) -> str:
        if math.isnan(self.mean):
            return ""
        if math.isnan(self.low):
            return f"{self.mean:+.3f}"
        text = f"{self.mean:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"
        return f"**{text}**" if self.real else text
