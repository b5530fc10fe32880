"""`tlt train` (the RL-step coordinator, what the engines run next, the Ray rollout workers, the
run's records, outputs and checkpoints) and `tlt capture` (one rollout recorded as a trace)."""
