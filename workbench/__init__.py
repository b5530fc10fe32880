"""TLT Workbench: contracts, calibration, tuning and the `tlt` command line."""
