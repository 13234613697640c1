"""What the planning models are about, read from `tenfold/data/`: hardware, models, number formats."""
