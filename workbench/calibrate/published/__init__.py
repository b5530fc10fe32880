"""Published figures (the TLT paper's microbenchmarks, SD by batch) as measurements."""
