"""The real TLT backend (GRPO on vLLM rollouts, spot drafter training, Ray): see the open issues."""
