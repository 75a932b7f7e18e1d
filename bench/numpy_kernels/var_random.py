"""var_random rows (labels of kernel_bench/var_random.rs)."""


def cases(n):
    return {}
