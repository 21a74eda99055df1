"""Tables and figures built from run records (pandas, seaborn, matplotlib); no module forces a backend, so a
notebook shows every figure inline.

    substrate  the zoo, the warm-up, independent GRPO, THL residual costs, MWRA compute
    probes     the probe and HACPO experiments: main, pool, stability, comparison, ablation and
               hyperparameter tables; accuracy, rescue and stepwise-clipping figures
    bandit     the bandit analysis: the stability-support plane and the dynamics
"""
