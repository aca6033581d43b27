"""Software prefetches for numba kernels: hints that ask for a cache line before a kernel
reads (or writes) it, so that the misses of many rows overlap. A prefetch never faults."""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


def emit_prefetch(
    builder: ir.IRBuilder, address: ir.Value, write: bool = False, near: bool = False
) -> None:
    """A prefetch of the line holding ``address`` (an integer): to read, into the L2 cache
    and beyond (``prefetcht1``), or into every level (``near``: ``prefetcht0``); to write
    (``write``), owned in every level."""
    byte_pointer = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    hint = ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32])
    prefetch = builder.module.declare_intrinsic("llvm.prefetch", [byte_pointer], hint)
    # Table rows into L2, not L1: a prefetch into L1 holds one of its few line-fill buffers
    # until the line arrives, and 16 rows of 5 lines ahead outnumber them (L2's queue is
    # deeper). At the full scale: 0.83 to 0.85 CPU s against 0.93 to 0.94 (medians
    # of five, alternating, one thread); L3 only (prefetcht2) 0.89. Of data, not code.
    flags = [i32(1 if write else 0), i32(3 if write or near else 2), i32(1)]
    builder.call(prefetch, [builder.inttoptr(address, byte_pointer), *flags])


def prefetcher(*, write: bool = False, near: bool = False) -> Any:
    """An intrinsic ``prefetch(array, row, offset)`` asking for the cache line ``offset``
    bytes into ``array[row]`` (see :func:`emit_prefetch` for ``write`` and ``near``)."""

    @intrinsic
    def _prefetch(typingctx, array, row, offset):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            rows = context.make_array(signature.args[0])(context, builder, args[0])
            stride = builder.extract_value(rows.strides, 0)
            start = builder.add(builder.mul(args[1], stride), args[2])
            address = builder.add(builder.ptrtoint(rows.data, stride.type), start)
            emit_prefetch(builder, address, write, near)
            return context.get_dummy_value()

        return types.void(array, types.int64, types.int64), codegen

    return _prefetch
