"""Decoding on vLLM with speculative decoding taken from a Policy (`engine.RolloutEngine`), run
step by step, with draft lengths a bandit picks between engine steps."""
