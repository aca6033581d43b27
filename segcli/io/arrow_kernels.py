"""The pyarrow compute kernels segcli uses (the key encoder, column conversions), called by name.

``import pyarrow.compute`` builds a Python wrapper with a parsed docstring for each of its
some 300 functions (about 30 ms of every ``--by`` run's start-up, 40 ms with its imports), and
pyarrow's own array methods (``take``, ``cast``, ``is_null``, ``filter``, ``unique``,
``dictionary_encode``, ...) import it on first use. The kernels and their options need only
``pyarrow._compute``: the same kernels, the same results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyarrow._compute import (
    CastOptions,
    FilterOptions,
    JoinOptions,
    MatchSubstringOptions,
    NullOptions,
    ReplaceSubstringOptions,
    SetLookupOptions,
    SortOptions,
    TakeOptions,
    call_function,
)


def _call(function: str, args: list[Any], options: Any = None) -> Any:
    return call_function(function, args, options)


def take(values: Any, indices: Any, *, boundscheck: bool = True) -> Any:
    return _call("take", [values, indices], TakeOptions(boundscheck=boundscheck))


def cast(values: Any, target: pa.DataType, *, safe: bool = True) -> Any:
    options = CastOptions.safe(target) if safe else CastOptions.unsafe(target)
    return _call("cast", [values], options)


def is_null(values: Any, *, nan_is_null: bool = False) -> Any:
    """Where ``values`` are null (and, with ``nan_is_null``, NaN: a missing key)."""
    return _call("is_null", [values], NullOptions(nan_is_null=nan_is_null))


def is_valid(values: Any) -> Any:
    return _call("is_valid", [values])


def is_nan(values: Any) -> Any:
    return _call("is_nan", [values])


def drop_null(values: Any) -> Any:
    return _call("drop_null", [values])


def filter_by(values: Any, mask: Any) -> Any:
    """``values.filter(mask)``: the rows where ``mask`` is true (a null drops its row)."""
    return _call("filter", [values, mask], FilterOptions("drop"))


def unique(values: Any) -> Any:
    return _call("unique", [values])


def dictionary_encode(values: Any) -> Any:
    return _call("dictionary_encode", [values])


def index_in(values: Any, value_set: Any, *, skip_nulls: bool = False) -> Any:
    return _call("index_in", [values], SetLookupOptions(value_set, skip_nulls=skip_nulls))


def sort_indices(table: Any, sort_keys: Sequence[tuple[str, str]]) -> Any:
    return _call("sort_indices", [table], SortOptions(list(sort_keys)))


def if_else(condition: Any, then: Any, otherwise: Any) -> Any:
    return _call("if_else", [condition, then, otherwise])


def add(left: Any, right: Any) -> Any:
    return _call("add", [left, right])


def binary_length(values: Any) -> Any:
    return _call("binary_length", [values])


def min_max(values: Any) -> Any:
    return _call("min_max", [values])


def total(values: Any) -> Any:
    """pyarrow's ``sum`` (nulls skipped; null when no value is)."""
    return _call("sum", [values])


def dictionary_decode(values: Any) -> Any:
    """A dictionary array's values, row by row (what ``DictionaryArray.dictionary_decode``
    gives)."""
    return take(values.dictionary, values.indices)


def or_(left: Any, right: Any) -> Any:
    return _call("or", [left, right])


def equal(left: Any, right: Any) -> Any:
    return _call("equal", [left, right])


def match_substring_regex(text: Any, pattern: str) -> Any:
    return _call("match_substring_regex", [text], MatchSubstringOptions(pattern))


def replace_substring(text: Any, pattern: str, replacement: str) -> Any:
    return _call("replace_substring", [text], ReplaceSubstringOptions(pattern, replacement))


def binary_join_element_wise(*strings: Any) -> Any:
    """The strings joined row by row by the last of them (null where any is null)."""
    return _call("binary_join_element_wise", list(strings), JoinOptions())


def list_value_length(lists: Any) -> Any:
    return _call("list_value_length", [lists])


def fill_null(values: Any, fill: Any) -> Any:
    """``values`` with each null replaced by ``fill`` (an Arrow scalar of their type)."""
    return _call("coalesce", [values, fill])


def list_parent_indices(lists: Any) -> Any:
    """For each value of ``lists.flatten()``, the index of the list holding it."""
    return _call("list_parent_indices", [lists])
