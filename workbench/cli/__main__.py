"""`python -m workbench.cli ...` runs `tlt ...`."""

from workbench.cli import app

app(prog_name="tlt")
