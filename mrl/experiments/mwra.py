"""30_mwra: the same short run on each backend, timed."""
from __future__ import annotations

from typing import Annotated, Literal

from mrl.core.config import PairingName, register_experiment
from mrl.core.validation import NonEmpty, PositiveInt, config_dataclass
from mrl.runtime.mwra import BACKENDS


@register_experiment("mwra")
@config_dataclass
class MwraTimingConfig:
    """30_mwra: the same short run on each backend, timed."""

    pairing: PairingName
    """the policy group, by its name in RunConfig.pairings"""
    steps: PositiveInt
    """RL steps per backend"""
    backends: Annotated[list[Literal[BACKENDS]], NonEmpty]
    """the backends to time (the first is the reference the others must match)"""

    def pairings_used(self) -> list[str]:
        return [self.pairing]
