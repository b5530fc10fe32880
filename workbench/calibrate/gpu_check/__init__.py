"""A `make gpu-check` file beside the measured database and the TLT paper."""
