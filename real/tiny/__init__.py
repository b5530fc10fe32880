"""Our own task and model: the GCD task (`task`), the character tokenizer (`tokenizer`), the tiny Qwen2 and its
SFT (`model`)."""
