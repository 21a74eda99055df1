"""Running the algorithm: sampling and its engines, the actor (one policy), the runner and its backends (MWRA),
placement and memory, checkpoints and saving, the run cache, live metrics and the zoo. Imports core and the ground,
never experiments, integrations or reports."""
