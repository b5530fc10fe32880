"""veRL run logs in: the reader, the run's shape, each step's modelled lengths, and the calibration
that fits a few run-level factors on its first steps and predicts the rest by simulation."""
