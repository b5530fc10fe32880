"""Discrete-event simulator of RL steps with long-tail rollouts (SimPy)."""
