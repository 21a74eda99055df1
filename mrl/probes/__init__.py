"""Sharing probes: one registered function per probe over the same batch structure (SPEC section 8).

    contract  ProbeLoss, ProbeConfig, ProbeOutput, PeerView, the registry (register_probe, get_probe)
    terms     loss terms the probes share (own GRPO loss, THL-retokenized peer rollouts, pooling)
    grpo      independent GRPO, the reference
    prp       prp, prp_naive: the peers' samples in the learner's group (data level)
    xgrpo     a baseline mixed with the peers' mean reward (value level)
    sgt       an NLL toward one verified peer success on the rescue set (outcome level)
    hacpo     hacpo and its baselines gspo, gspo_x2, naive; hacpo_primitives holds HACPO's pure functions
    graft     a peer's verified success on prompts the learner's group all failed, compatibility-weighted and
              token-clipped (trajectory level; a reconstruction of GRAFT)
    trrd      GRPO with the token ratio anchored to an old-policy/teacher mixture, the teacher a peer's fixed
              checkpoint through THL (trust region level; a reconstruction of RLAD's TRRD)

Adding a probe is one file that calls `register_probe`, imported below (or anywhere before a run starts).
"""
from mrl.probes.contract import (PROBES, PeerView, Probe, ProbeConfig, ProbeLoss, ProbeOutput, as_probe_config,
                                 get_probe, probe_config, register_probe)
from mrl.probes import graft, grpo, hacpo, prp, sgt, trrd, xgrpo  # noqa: E402,F401  (registration)

__all__ = ["PROBES", "PeerView", "Probe", "ProbeConfig", "ProbeLoss", "ProbeOutput", "as_probe_config", "get_probe",
           "probe_config", "register_probe"]
