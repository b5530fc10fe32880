"""The EAGLE drafter: its module and loss, training, checkpoints and spot training."""
