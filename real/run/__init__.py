"""`tlt train` (Ray workers, the RL-step coordinator, checkpoints) and `tlt capture`."""
