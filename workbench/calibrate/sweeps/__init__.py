"""An engine sweep (`tlt engine-sweep`) -> a Profile of that engine: the declared split (`split`),
the base the workbench would otherwise use (`base`), the fit and every cell predicted before and
after it (`fit`), the report (`report`)."""
