"""The EAGLE drafter: its module and loss, the hidden-state records it trains on, its training,
the checkpoints vLLM loads, spot training on idle workers, and vLLM's n-gram proposal replayed."""
