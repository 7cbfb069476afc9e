"""Tables (and, with the training work, plots) of datasets, partitions and runs."""
