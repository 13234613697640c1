"""The planning models against published measured runs: the CSV rows, the training and serving validators,
and the fit of the calibration's free parameters."""
