"""What a real engine recorded (traces, `tlt train` runs, operator timings) -> a Profile."""
