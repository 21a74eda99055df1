"""The contextual bandit of the MRL trade-off analysis (docs/architecture.md, The bandit analysis; a reconstruction).

M contexts with K discrete responses each and one correct response, of four types (shared-easy, A-hard/B-easy,
B-hard/A-easy, both-hard), and two softmax policies A and B with different supports, whose logits are
`prior[x] + features[x] @ theta`: the prior holds the support and the skill, `theta` is what training changes.
How the types, the skill directions and the support overlap kappa are built: docs/architecture.md, The bandit
analysis (The environment).
"""
from __future__ import annotations

import dataclasses

import numpy as np

PROMPT_TYPES = ("shared-easy", "A-hard/B-easy", "B-hard/A-easy", "both-hard")
DEFAULT_TYPE_FRACTIONS = {"shared-easy": 0.3, "A-hard/B-easy": 0.3, "B-hard/A-easy": 0.3, "both-hard": 0.1}
# which policy covers the correct response, per type: (A covers, B covers)
COVERS = {"shared-easy": (True, True), "A-hard/B-easy": (False, True), "B-hard/A-easy": (True, False),
          "both-hard": (False, False)}


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """Knobs of the bandit environment."""
    prompts: int = 200
    """M, contexts."""
    responses: int = 16
    """K, responses per context."""
    support_size: int = 8
    """responses each policy puts mass on (per prompt)."""
    kappa: float = 0.5
    """support overlap: fraction of B's support inside A's support, in [0, 1]."""
    support_gap: float = 6.0
    """how far below the on-support logits the off-support responses sit."""
    easy_logit: float = 2.0
    """skill: the logit added to C_x for a policy that covers it (B's and A's alike)."""
    prior_noise: float = 0.5
    """std of the on-support logits."""
    feature_dim: int = 32
    """d, the dimension of theta."""
    feature_noise: float = 0.3
    """std of each response's random features (wrong responses: noise only)."""
    skill_norm: float = 2.0
    """norm of the type's skill direction u_t in the correct responses' features."""
    type_fractions: tuple = tuple(DEFAULT_TYPE_FRACTIONS.items())
    """(type, fraction) pairs; fractions sum to 1."""
    seed: int = 0

    def __post_init__(self):
        if not 0.0 <= self.kappa <= 1.0:
            raise ValueError(f"kappa={self.kappa!r} is not allowed; expected a fraction in [0, 1]")
        if not 2 <= self.support_size < self.responses:
            raise ValueError(f"support_size={self.support_size!r} is not allowed; expected 2 <= support_size < "
                             f"responses={self.responses}")
        fractions = dict(self.type_fractions)
        unknown = set(fractions) - set(PROMPT_TYPES)
        if unknown:
            raise ValueError(f"type_fractions has unknown types {sorted(unknown)}; allowed: {list(PROMPT_TYPES)}")
        if abs(sum(fractions.values()) - 1.0) > 1e-9 or min(fractions.values()) < 0:
            raise ValueError(f"type_fractions={fractions!r} must be non-negative and sum to 1")
        if self.prompts < 1 or self.feature_dim < len(PROMPT_TYPES):
            raise ValueError(f"prompts={self.prompts} must be >= 1 and feature_dim={self.feature_dim} >= "
                             f"{len(PROMPT_TYPES)} (one skill direction per type)")


@dataclasses.dataclass(frozen=True)
class BanditEnv:
    """Arrays of one environment: M prompts, K responses, d features."""
    types: np.ndarray      # (M,) index into PROMPT_TYPES
    correct: np.ndarray    # (M, K) float 0/1: r(x, y)
    prior_a: np.ndarray    # (M, K) logits of A at theta = 0
    prior_b: np.ndarray    # (M, K)
    features: np.ndarray   # (M, K, d)
    support_a: np.ndarray  # (M, K) bool: the responses A puts mass on
    config: EnvConfig

    @property
    def type_names(self) -> np.ndarray:
        return np.asarray(PROMPT_TYPES)[self.types]

    def probs(self, theta_a: np.ndarray | None = None, theta_b: np.ndarray | None = None):
        """(pi_A, pi_B), each (M, K): softmax(prior + features @ theta)."""
        return (softmax(self.logits(self.prior_a, theta_a)), softmax(self.logits(self.prior_b, theta_b)))

    def logits(self, prior: np.ndarray, theta: np.ndarray | None) -> np.ndarray:
        return prior if theta is None else prior + self.features @ theta

    def overlap(self) -> np.ndarray:
        """(M,) realised kappa: B's probability mass on A's support at theta = 0."""
        return (self.probs()[1] * self.support_a).sum(axis=1)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def make_env(config: EnvConfig = EnvConfig(), prompts: int | None = None, seed: int | None = None) -> BanditEnv:
    """Draw an environment; `prompts`/`seed` override the config's (held-out sets share the skill directions).

    The skill directions u_t depend on config.seed only, so a held-out environment drawn with another
    `seed` tests the same skills on new prompts.
    """
    m = config.prompts if prompts is None else prompts
    k, s = config.responses, config.support_size
    skills_rng = np.random.default_rng([config.seed, 0])
    directions = np.linalg.qr(skills_rng.standard_normal((config.feature_dim, len(PROMPT_TYPES))))[0].T
    directions *= config.skill_norm                                   # (types, d) orthogonal skill directions
    rng = np.random.default_rng([config.seed if seed is None else seed, 1])
    fractions = dict(config.type_fractions)
    counts = np.floor(np.array([fractions.get(t, 0.0) for t in PROMPT_TYPES]) * m).astype(int)
    counts[np.argmax(counts)] += m - counts.sum()
    types = rng.permutation(np.repeat(np.arange(len(PROMPT_TYPES)), counts))
    correct = np.zeros((m, k))
    prior_a = np.full((m, k), -config.support_gap)
    prior_b = np.full((m, k), -config.support_gap)
    on_support_a = np.zeros((m, k), dtype=bool)
    n_inside = int(round(config.kappa * s))
    for x in range(m):  # M is small (hundreds): the construction is not on any hot path
        a_covers, b_covers = COVERS[PROMPT_TYPES[types[x]]]
        answer = rng.integers(k)
        correct[x, answer] = 1.0
        others = rng.permutation(np.delete(np.arange(k), answer))
        support_a = np.concatenate([[answer], others[: s - 1]]) if a_covers else others[:s]
        outside_a = np.setdiff1d(np.arange(k), support_a)
        support_b = _support_b(rng, support_a, outside_a, n_inside, s, answer, b_covers)
        on_support_a[x, support_a] = True
        prior_a[x, support_a] = rng.normal(0.0, config.prior_noise, s)
        prior_b[x, support_b] = rng.normal(0.0, config.prior_noise, s)
        if a_covers:
            prior_a[x, answer] += config.easy_logit
        if b_covers:
            prior_b[x, answer] += config.easy_logit
    features = rng.normal(0.0, config.feature_noise, (m, k, config.feature_dim))
    features += correct[:, :, None] * directions[types][:, None, :]
    return BanditEnv(types=types, correct=correct, prior_a=prior_a, prior_b=prior_b, features=features,
                     support_a=on_support_a, config=config)


def _support_b(rng, support_a, outside_a, n_inside, size, answer, b_covers) -> np.ndarray:
    """B's support: n_inside responses from A's support, the rest from outside it; C_x in iff b_covers."""
    inside = [y for y in rng.permutation(support_a) if y != answer]
    outside = [y for y in rng.permutation(outside_a) if y != answer]
    answer_inside = answer in support_a
    if b_covers:  # the answer takes one slot on its side of A's support
        take_in = min(max(n_inside - answer_inside, 0), len(inside), size - 1)
        take_out = size - 1 - take_in
        if take_out > len(outside):
            take_out, take_in = len(outside), size - 1 - len(outside)
        return np.array([answer] + inside[:take_in] + outside[:take_out])
    take_in = min(n_inside, len(inside))
    take_out = size - take_in
    if take_out > len(outside):
        take_out, take_in = len(outside), size - len(outside)
    return np.array(inside[:take_in] + outside[:take_out])
