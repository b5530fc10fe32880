"""Decoding on vLLM with speculative decoding taken from a Policy (`engine.RolloutEngine`)."""
