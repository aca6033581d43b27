"""The ops' names and one-line descriptions, free of NumPy so the CLI's help starts fast.

:mod:`segcli.ops` builds its table from these names; a test keeps the two in step.
"""

#: The ops that take ``--ddof``.
DDOF_OPS = ("var", "std")
#: The ops that take ``--q``.
Q_OPS = ("quantile",)
#: The holistic ops: a segment's values are needed together (sorted, not folded).
HOLISTIC_OPS = ("median", "quantile", "nunique")

OP_SUMMARIES: dict[str, str] = {
    "sum": "Sum of the rows in each segment (integers wrap, as TF).",
    "mean": "Mean of each segment: sum / count, 0 for an empty segment.",
    "min": "Minimum of each segment; NaN propagates; empty: the dtype's largest finite value.",
    "max": "Maximum of each segment; NaN propagates; empty: the dtype's lowest finite value.",
    "prod": "Product of the rows in each segment (integers wrap, as TF).",
    "sqrt_n": "Sum / sqrt(count) per segment, 0 for an empty segment.",
    "count": "Number of rows in each segment (int64).",
    "var": "Variance of each segment, sum((x - mean)^2) / (count - ddof); --ddof D (default 0).",
    "std": "Standard deviation of each segment: sqrt(var), with the same --ddof.",
    "argmin": "Row of each segment's minimum (the first on ties; a NaN wins); -1 if empty.",
    "argmax": "Row of each segment's maximum (the first on ties; a NaN wins); -1 if empty.",
    "first": "Value of each segment's first row; 0 for an empty segment.",
    "last": "Value of each segment's last row; 0 for an empty segment.",
    "any": "Whether any value of the segment is non-zero (NaN is); false if empty.",
    "all": "Whether every value of the segment is non-zero (NaN is); true if empty.",
    "logsumexp": "log(sum(exp(x))) per segment, without overflow; -inf for an empty segment.",
    "median": "Median of each segment (NumPy's; NaN propagates); 0 for an empty segment.",
    "quantile": "Quantile --q Q of each segment (NumPy's linear method); 0 for an empty segment.",
    "nunique": "Number of distinct values in each segment (NaN counts once; int64).",
}
