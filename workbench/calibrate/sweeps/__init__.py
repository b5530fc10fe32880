"""An engine sweep (`tlt engine-sweep`) -> a Profile of that engine: the declared split (`split`),
the base the workbench would otherwise use (`base`), the drift taken out by the sweep's own
pairing (`paired`), the fit and every cell predicted before and after it (`fit`), the report
(`report`)."""
