"""The algorithm: the settings (config, validation), GRPO's loss, THL and the marginal, SEE's exchange, the tasks,
the rollout's record (batch), the probes and the bandit analysis. Functions and records: nothing here starts a
process, places a model on a device or samples from one; SEE's experience log is the one file it writes. Imports
nothing of mrl outside core."""
