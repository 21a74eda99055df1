"""60_bandit: the contextual-bandit analysis (a reconstruction, mrl.core.bandit), its budgets."""
from __future__ import annotations

from typing import Annotated

from pydantic import Field

from mrl.core.config import register_experiment
from mrl.core.validation import Float, NonEmpty, PositiveInt, Seeds, config_dataclass

Kappa = Annotated[Float, Field(gt=0, le=1)]


@register_experiment("bandit")
@config_dataclass
class BanditConfig:
    """60_bandit: the contextual-bandit analysis (a reconstruction), its budgets."""

    kappas: Annotated[list[Kappa], NonEmpty]
    """support overlaps kappa of the stability-support plane"""
    reps: PositiveInt
    """Monte Carlo repetitions per point"""
    dynamics_kappas: Annotated[list[Kappa], NonEmpty]
    """support overlaps of the dynamic simulation"""
    seeds: Seeds
    """seeds of the dynamic simulation"""
    steps: PositiveInt
    """steps T of the dynamic simulation"""
