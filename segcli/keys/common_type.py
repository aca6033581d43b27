"""The one type that a key column's types in several files widen to (a Dask run's shards).

A streamed run casts each block's key values to the first block's type (see
:mod:`segcli.keys`); over one file every block has the file's type. Files written apart may
not agree (``int32`` in one, ``int64`` in the next; seconds then microseconds), and casting to
the first file's type would refuse values that the next file's type holds. So a run over
several files fixes each key column's type up front: the narrowest type that every file's
values fit, as polars and duckdb unify them, where that type is plain to find; otherwise the
first file's, as before (a value that does not fit it is then an error naming it).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.types as pt

_UNITS = ("s", "ms", "us", "ns")


def common_key_type(types: Sequence[pa.DataType]) -> pa.DataType:
    """The type the key values of every one of ``types`` fit (see the module's docstring);
    ``types[0]`` where none is plain to find. Null types (a file whose column has no value)
    take any other type."""
    valued = [t for t in types if not pt.is_null(t)]
    if not valued:
        return types[0]
    first = valued[0]
    if all(t == first for t in valued):
        return first
    for widen in (_integer_or_float, _temporal, _decimal):
        common = widen(valued)
        if common is not None:
            return common
    return types[0]


def common_key_schema(schemas: Sequence[pa.Schema]) -> pa.Schema:
    """The first schema with each field's type widened to :func:`common_key_type` of the
    field's types in every schema (each schema holds the same key fields, by name)."""
    first = schemas[0]
    fields = []
    for field in first:
        types = [schema.field(field.name).type for schema in schemas]
        fields.append(field.with_type(common_key_type(types)))
    return pa.schema(fields, metadata=first.metadata)


def _integer_or_float(types: list[pa.DataType]) -> pa.DataType | None:
    if not all(pt.is_integer(t) or pt.is_floating(t) for t in types):
        return None
    floats = [t for t in types if pt.is_floating(t)]
    if floats:
        # An integer key among float keys compares as the float it is (see segcli.keys);
        # float64 holds every float key and the integers a float can tell apart.
        if len(floats) == len(types):
            return max(floats, key=lambda t: t.bit_width)
        return pa.float64()
    signed = [t.bit_width for t in types if pt.is_signed_integer(t)]
    unsigned = [t.bit_width for t in types if pt.is_unsigned_integer(t)]
    if not signed:
        return pa.type_for_alias(f"uint{max(unsigned)}")
    width = max(signed + [2 * w for w in unsigned])  # a signed type holds uintN from 2N bits
    return pa.type_for_alias(f"int{width}") if width <= 64 else None


def _temporal(types: list[pa.DataType]) -> pa.DataType | None:
    """Timestamps of one time zone, or durations, at the finest unit among them."""
    if all(pt.is_timestamp(t) for t in types):
        if len({t.tz for t in types}) != 1:
            return None
        unit = max((t.unit for t in types), key=_UNITS.index)
        return pa.timestamp(unit, tz=types[0].tz)
    if all(pt.is_duration(t) for t in types):
        return pa.duration(max((t.unit for t in types), key=_UNITS.index))
    return None


def _decimal(types: list[pa.DataType]) -> pa.DataType | None:
    """Decimals with the most digits before the point and the most after it."""
    if not all(pt.is_decimal(t) for t in types):
        return None
    scale = max(t.scale for t in types)
    precision = max(t.precision - t.scale for t in types) + scale
    if precision <= 38 and all(pt.is_decimal128(t) for t in types):
        return pa.decimal128(precision, scale)
    return pa.decimal256(precision, scale) if precision <= 76 else None
