"""The keys of a CSV/TSV ``--keys-from`` file, read as the data's key types.

A keys file is text, so its keys are read in the data's key types; when one does not read
(``x`` among integers, a date of another form), pyarrow's CSV reader names the value but neither
its column's name nor its row, and reading it as inferred types instead only says that the
column's type differs: :func:`unreadable_key` finds the first such value, its row and how many
rows hold one. Binary keys (a UUID, say) are hex text, as the output writes them and
``--expect`` reads them back: :func:`binary_from_hex` decodes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from segcli.errors import InvalidInputError
from segcli.io.formats import shown

if TYPE_CHECKING:
    import pyarrow as pa

    from segcli.io.tables import TableFile


def unreadable_key(
    option_path: str, table: TableFile, types: Mapping[str, pa.DataType]
) -> InvalidInputError | None:
    """The error naming the first key of ``table`` whose text does not read as its column's
    type in ``types``; None if every key reads (the failure was something else)."""
    import pyarrow as pa

    from segcli.errors import ReadError

    try:
        text = table.read(list(types), {name: pa.string() for name in types})
    except ReadError:
        # Text that is not UTF-8 reads as no string, and pyarrow names neither its row nor its
        # bytes: the caller's read in inferred types does (binary, then checked as UTF-8).
        return None
    for name, type_ in types.items():
        column = text.column(name)
        encoded = column.combine_chunks().dictionary_encode()
        bad = _unreadable(encoded.dictionary, type_)
        if not bad:
            continue
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(np.isin(codes, bad) & encoded.indices.is_valid().to_numpy(False))
        value = column[int(rows[0])].as_py()
        count = f"{rows.size:,} row{'s' if rows.size != 1 else ''}"
        return InvalidInputError(
            f"--keys-from {option_path}: key column '{name}' holds {shown(value)} at row "
            f"{int(rows[0])}, which does not read as {type_}, the key's type in the data "
            f"({count} with such a key)"
        )
    return None


def _unreadable(values: pa.Array, type_: pa.DataType, start: int = 0) -> list[int]:
    """Positions of ``values`` that do not cast to ``type_``: halves are cast until each bad
    value stands alone, so a few bad values among many cost a few casts."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(values):
        return []
    try:
        pc.cast(values, type_, safe=True)
        return []
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        if len(values) == 1:
            return [start]
    half = len(values) // 2
    return _unreadable(values[:half], type_, start) + _unreadable(
        values[half:], type_, start + half
    )


def is_binary(type_: pa.DataType) -> bool:
    """A binary key type of any kind: the output writes each as hex text."""
    import pyarrow.types as pt

    return bool(
        pt.is_binary(type_)
        or pt.is_large_binary(type_)
        or pt.is_fixed_size_binary(type_)
        or pt.is_binary_view(type_)
    )


def hex_as_text(types: Mapping[str, pa.DataType]) -> dict[str, pa.DataType]:
    """``types`` with each binary type read as text: a text file holds binary keys as hex."""
    import pyarrow as pa

    return {name: pa.string() if is_binary(type_) else type_ for name, type_ in types.items()}


def binary_from_hex(option_path: str, keys: pa.Table, types: Mapping[str, pa.DataType]) -> pa.Table:
    """``keys`` with each column that ``types`` makes binary decoded from its hex text (null
    stays null); a value that is not hex, or not of a fixed-size type's width, is an error
    naming it and its row."""
    import pyarrow as pa

    for name, type_ in types.items():
        if not is_binary(type_):
            continue
        width = type_.byte_width if pa.types.is_fixed_size_binary(type_) else None
        decoded: list[bytes | None] = []
        for row, text in enumerate(keys.column(name).to_pylist()):
            value = None if text is None else _hex_bytes(text)
            if text is not None and (value is None or (width and len(value) != width)):
                wanted = "hex text" if width is None else f"hex text of {width} bytes"
                raise InvalidInputError(
                    f"--keys-from {option_path}: key column '{name}' holds {text!r} at row "
                    f"{row}, which is not {wanted} (binary keys are written as hex, like "
                    "the output's)"
                )
            decoded.append(value)
        index = keys.schema.get_field_index(name)
        keys = keys.set_column(index, name, pa.array(decoded, pa.binary()).cast(type_))
    return keys


def _hex_bytes(text: str) -> bytes | None:
    try:
        return bytes.fromhex(text)
    except ValueError:
        return None
