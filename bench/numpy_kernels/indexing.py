"""indexing rows (labels of kernel_bench/indexing.rs)."""


def cases(n):
    return {}
