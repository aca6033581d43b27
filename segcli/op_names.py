"""The ops' names and one-line descriptions, free of NumPy so the CLI's help starts fast.

:mod:`segcli.ops` builds its table from these names; a test keeps the two in step.
"""

#: The ops that take ``--ddof``.
DDOF_OPS = ("var", "std")

OP_SUMMARIES: dict[str, str] = {
    "sum": "Sum of the rows in each segment (integers wrap, as TF).",
    "mean": "Mean of each segment: sum / count, 0 for an empty segment.",
    "min": "Minimum of each segment; NaN propagates; empty: the dtype's largest finite value.",
    "max": "Maximum of each segment; NaN propagates; empty: the dtype's lowest finite value.",
    "prod": "Product of the rows in each segment (integers wrap, as TF).",
    "sqrt_n": "Sum / sqrt(count) per segment, 0 for an empty segment.",
    "count": "Number of rows in each segment (int64).",
    "var": "Variance of each segment, sum((x - mean)^2) / (count - ddof); --ddof D (default 0).",
}
