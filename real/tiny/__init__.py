"""Our own task and model: the GCD task, its character tokenizer, the tiny Qwen2 with its SFT, and
its generation and evaluation outside vLLM."""
