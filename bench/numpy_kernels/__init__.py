"""numpy baselines of the `kernel_bench --suite ops` rows, one module per family."""
