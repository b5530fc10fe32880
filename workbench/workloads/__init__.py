"""Real response lengths in: read length logs (`reader`), fit the length model (`fit`), report and
write the Workload (`build`); `tlt workload import` is their command."""
