"""CUDA C sources of the CuPy engine's kernels, as plain strings (no CuPy import here).

Each kernel is generated for the C types of one call (id type, value type, accumulator kind), so
the sources stay free of templates and every generated variant can be compiled ahead of a run
with NVRTC alone (``all_sources``), even on a machine without a GPU.

Three kernels do all the work:

``seg_scatter``
    Order-independent folds with integer atomics: the row count, integer sums (two's complement
    wraps modulo 2**64 whatever the order, so the bytes are exact), min and max on order-keys
    (see ``key_encode`` in :mod:`segcli.engines.cupy_fold`), and, only when asked for,
    ``--fast-atomics`` float sums with double-precision ``atomicAdd`` (not deterministic).
    A variant privatises the accumulator in shared memory when ``n * (width + 1)`` slots fit.

``seg_fold_pieces``
    The deterministic fold: one thread per (piece, column) folds the rows of one piece, a run of
    consecutive positions of one segment, strictly in position order. Run in levels by
    :func:`segcli.engines.cupy_fold.fold_ordered`.

``seg_joint``
    The joint folds of :mod:`segcli.ops` (var/std's shifted sums, argmin/argmax, first/last,
    logsumexp's scaled sum): one thread per (segment, column) walks the segment's rows of the
    block in row order, reading and writing every intermediate of the op at once, the same
    steps as the NumPy engine's fold. No atomics, so the bytes do not depend on the hardware's
    order; the rows' global numbers decide argmin/argmax ties and first/last.

Every kernel is compiled with ``--fmad=false``: a contracted multiply-add (complex products)
would round differently from NumPy's separate multiply and add.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from segcli.ops import LARGEST_SCALED, PLAIN_EXP

#: NVRTC options for every kernel.
OPTIONS = ("--fmad=false",)

#: Threads per block for every launch.
THREADS = 256

#: Shared-memory budget of the privatised scatter: 48 KiB needs no opt-in on any GPU.
SHARED_BYTES = 48 * 1024
SHARED_SLOTS = SHARED_BYTES // 8

#: C type of each NumPy integer and float dtype (float16 data is widened to float32 first).
C_TYPES: dict[str, str] = {
    "int8": "signed char",
    "uint8": "unsigned char",
    "int16": "short",
    "uint16": "unsigned short",
    "int32": "int",
    "uint32": "unsigned int",
    "int64": "long long",
    "uint64": "unsigned long long",
    "float32": "float",
    "float64": "double",
}

#: How ``seg_scatter`` folds a value into a slot: each slot is 8 bytes.
SCATTER_MODES = ("count", "add_int", "add_float", "min", "max")

#: Accumulator kinds of ``seg_fold_pieces``: int64/uint64 share ``u64`` (wrapping arithmetic).
PIECE_ACCS = ("f64", "u64", "c128")
PIECE_COMBINES = ("add", "mul")


def c_type(dtype: Any) -> str:
    """The C type for a NumPy dtype the kernels read."""
    name = np.dtype(dtype).name
    try:
        return C_TYPES[name]
    except KeyError:
        raise ValueError(f"no CUDA kernel reads {name} values") from None


_COMMON = r"""
typedef unsigned long long u64;
#define U64_MAX 0xFFFFFFFFFFFFFFFFULL
#define SIGN_BIT 0x8000000000000000ULL

// The segment a row goes to, or -1 for a row validation allowed to drop. Ids are compared by
// value: for unsigned types ``v >= 0`` is always true and ``v < n`` compares as unsigned.
template <typename T>
__device__ __forceinline__ long long seg_of(T v, long long n) {
    return (v >= 0 && v < n) ? (long long)v : -1LL;
}

// Order-preserving 64-bit keys, the same mapping as ``cupy_fold.key_encode``: unsigned
// integer order on keys is the value order. NaN maps below everything for min and above
// everything for max, so NaN wins, whatever the order of the rows.
__device__ __forceinline__ u64 key_of_double(double v, bool for_min) {
    if (v != v) return for_min ? 0ULL : U64_MAX;
    u64 bits = (u64)__double_as_longlong(v);
    return (bits & SIGN_BIT) ? ~bits : (bits | SIGN_BIT);
}
__device__ __forceinline__ u64 key_of(float v, bool for_min) {
    return key_of_double((double)v, for_min);
}
__device__ __forceinline__ u64 key_of(double v, bool for_min) {
    return key_of_double(v, for_min);
}
__device__ __forceinline__ u64 key_of(long long v, bool) { return ((u64)v) ^ SIGN_BIT; }
__device__ __forceinline__ u64 key_of(int v, bool f) { return key_of((long long)v, f); }
__device__ __forceinline__ u64 key_of(short v, bool f) { return key_of((long long)v, f); }
__device__ __forceinline__ u64 key_of(signed char v, bool f) { return key_of((long long)v, f); }
__device__ __forceinline__ u64 key_of(u64 v, bool) { return v; }
__device__ __forceinline__ u64 key_of(unsigned int v, bool) { return (u64)v; }
__device__ __forceinline__ u64 key_of(unsigned short v, bool) { return (u64)v; }
__device__ __forceinline__ u64 key_of(unsigned char v, bool) { return (u64)v; }
"""


# --- seg_scatter -----------------------------------------------------------------------------

# (slot C type, identity, how a row value becomes a slot value, atomic on a slot pointer)
_SCATTER: dict[str, tuple[str, str, str, str]] = {
    # Integers: fold as unsigned 64-bit, so overflow wraps (defined behaviour in C++).
    "add_int": ("u64", "0ULL", "(u64)(long long)(v)", "atomicAdd(p, x)"),
    "add_float": ("double", "0.0", "(double)(v)", "atomicAdd(p, x)"),
    "min": ("u64", "U64_MAX", "key_of(v, true)", "atomicMin(p, x)"),
    "max": ("u64", "0ULL", "key_of(v, false)", "atomicMax(p, x)"),
}


def scatter_source(mode: str, id_type: str, value_type: str | None, shared: bool) -> str:
    """``seg_scatter`` for one mode: count rows per segment and, unless mode is ``count``,
    fold each element of a row into its segment's slot with an atomic.

    Arguments: ``ids`` (rows), ``vals`` (rows * width, row-major; unused for count), ``acc``
    (n * width slots), ``count`` (n, int64 seen as u64), ``rows``, ``width``, ``n``.
    With ``shared``, the block first folds into a private copy of every slot in shared memory
    (``n * (width + 1) <= SHARED_SLOTS``) and then adds its non-identity slots to the global
    ones: one global atomic per slot per block instead of one per element.
    """
    if mode not in SCATTER_MODES:
        raise ValueError(f"unknown scatter mode {mode!r}")
    has_acc = mode != "count"
    slot_t, identity, convert, atomic = _SCATTER.get(mode, ("u64", "0ULL", "", ""))
    value_t = value_type or "unsigned char"
    lines = [
        _COMMON,
        f"typedef {id_type} id_t;",
        f"typedef {value_t} val_t;",
        f"typedef {slot_t} slot_t;",
        f"#define IDENTITY ({identity})",
        f"#define CONVERT(v) ({convert or '0'})",
        "__device__ __forceinline__ void fold_slot(slot_t* p, slot_t x) { "
        + (f"{atomic};" if has_acc else "")
        + " }",
        f"#define HAS_ACC {1 if has_acc else 0}",
        f"#define SHARED {1 if shared else 0}",
        r"""
extern "C" __global__ void seg_scatter(
    const id_t* __restrict__ ids, const val_t* __restrict__ vals, slot_t* acc, u64* count,
    long long rows, long long width, long long n)
{
#if SHARED
    // Layout: n * width accumulator slots, then n count slots (8 bytes each).
    extern __shared__ u64 smem[];
    slot_t* s_acc = (slot_t*)smem;
    u64* s_count = smem + (HAS_ACC ? n * width : 0);
    for (long long j = threadIdx.x; j < n * width; j += blockDim.x) {
        if (HAS_ACC) s_acc[j] = IDENTITY;
    }
    for (long long j = threadIdx.x; j < n; j += blockDim.x) s_count[j] = 0ULL;
    __syncthreads();
    u64* to_count = s_count;
#else
    u64* to_count = count;
#endif
#if HAS_ACC && SHARED
    slot_t* to_acc = s_acc;
#elif HAS_ACC
    slot_t* to_acc = acc;
#endif
    // One thread per element (row r, column c) of the row-major block, grid-stride.
    const long long total = HAS_ACC ? rows * width : rows;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const long long r = (!HAS_ACC || width == 1) ? e : e / width;
        const long long c = e - r * (HAS_ACC ? width : 1);
        const long long s = seg_of(ids[r], n);
        if (s < 0) continue;
        if (c == 0) atomicAdd(&to_count[s], 1ULL);
#if HAS_ACC
        const val_t v = vals[e];
        fold_slot(&to_acc[s * width + c], CONVERT(v));
#endif
    }
#if SHARED
    __syncthreads();
    // Publish this block's partial: only slots it changed.
    for (long long j = threadIdx.x; j < n * width; j += blockDim.x) {
        if (HAS_ACC && s_acc[j] != IDENTITY) fold_slot(&acc[j], s_acc[j]);
    }
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        if (s_count[j]) atomicAdd(&count[j], s_count[j]);
    }
#endif
}
""",
    ]
    return "\n".join(lines)


# --- seg_fold_pieces -------------------------------------------------------------------------

# (accumulator C type, identity, combine expressions by op, load of element e, store)
_PIECE_ACC: dict[str, dict[str, str]] = {
    "f64": {
        "acc_t": "double",
        "add_identity": "0.0",
        "mul_identity": "1.0",
        "add": "a + b",
        "mul": "a * b",
        "load": "(double)src[e]",
        "store": "dst[e] = a;",
        "load_dst": "dst[e]",
    },
    "u64": {
        "acc_t": "u64",
        "add_identity": "0ULL",
        "mul_identity": "1ULL",
        "add": "a + b",
        "mul": "a * b",
        # Through long long first, so a negative int32 sign-extends before the reinterpretation.
        "load": "(u64)(long long)src[e]",
        "store": "dst[e] = a;",
        "load_dst": "dst[e]",
    },
    "c128": {
        # Complex values are stored as interleaved (real, imag) pairs: element e is at 2e, 2e+1.
        "acc_t": "cplx",
        "add_identity": "cplx{0.0, 0.0}",
        "mul_identity": "cplx{1.0, 0.0}",
        "add": "cplx{a.re + b.re, a.im + b.im}",
        # NumPy's formula, term for term (and no FMA: see OPTIONS).
        "mul": "cplx{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}",
        "load": "cplx{(double)src[2 * e], (double)src[2 * e + 1]}",
        "store": "dst[2 * e] = a.re; dst[2 * e + 1] = a.im;",
        "load_dst": "cplx{dst[2 * e], dst[2 * e + 1]}",
    },
}


def fold_pieces_source(
    combine: str, acc: str, value_type: str, ordered: bool, from_acc: bool
) -> str:
    """``seg_fold_pieces``: thread (p, c) folds column c of rows ``starts[p] .. starts[p+1]-1``.

    Position k holds row ``order[k]`` of ``src`` when ``ordered`` (the stable sort's
    permutation), else row k. ``src`` is ``rows * width`` values of ``value_type`` (pairs for
    complex). Without ``from_acc`` the fold starts from the identity and lands in row p of
    ``dst`` (``P * width``, the next level's input). With ``from_acc`` it starts from row
    ``segs[p]`` of ``dst`` (the state's accumulator) and writes back there: each segment
    appears in at most one piece then, so no two threads touch one element.
    """
    if combine not in PIECE_COMBINES or acc not in PIECE_ACCS:
        raise ValueError(f"no piece fold for {combine} into {acc}")
    spec = _PIECE_ACC[acc]
    dst_t = "u64" if acc == "u64" else "double"
    return "\n".join(
        [
            _COMMON,
            "struct cplx { double re; double im; };",
            f"typedef {value_type} val_t;",
            f"typedef {spec['acc_t']} acc_t;",
            f"typedef {dst_t} dst_t;",
            f"#define ORDERED {1 if ordered else 0}",
            f"#define FROM_ACC {1 if from_acc else 0}",
            "__device__ __forceinline__ acc_t combine(acc_t a, acc_t b) { return "
            + spec[combine]
            + "; }",
            "__device__ __forceinline__ acc_t load(const val_t* __restrict__ src, long long e) "
            "{ return " + spec["load"] + "; }",
            "__device__ __forceinline__ acc_t load_dst(const dst_t* dst, long long e) "
            "{ return " + spec["load_dst"] + "; }",
            "__device__ __forceinline__ void store(dst_t* dst, long long e, acc_t a) { "
            + spec["store"]
            + " }",
            f"#define IDENTITY ({spec[combine + '_identity']})",
            r"""
extern "C" __global__ void seg_fold_pieces(
    const val_t* __restrict__ src, const long long* __restrict__ order,
    const long long* __restrict__ starts, const long long* __restrict__ segs, dst_t* dst,
    long long pieces, long long width)
{
    const long long total = pieces * width;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        // Consecutive threads take consecutive columns of one piece: coalesced for wide rows.
        const long long p = t / width;
        const long long c = t - p * width;
        const long long out = FROM_ACC ? segs[p] * width + c : t;
        acc_t a = FROM_ACC ? load_dst(dst, out) : IDENTITY;
        const long long stop = starts[p + 1];
        // Unrolling lets several loads be in flight; the combines stay in position order.
#pragma unroll 8
        for (long long k = starts[p]; k < stop; ++k) {
            const long long row = ORDERED ? order[k] : k;
            a = combine(a, load(src, row * width + c));   // strictly in position order
        }
        store(dst, out, a);
    }
}
""",
        ]
    )


def all_sources() -> dict[str, str]:
    """Every kernel variant the engine can build, by a readable name (for ahead-of-time checks).

    Value types cover every data dtype after widening (float16 is folded as float32, complex as
    pairs of its real type).
    """
    value_types = sorted(set(C_TYPES.values()))
    sources: dict[str, str] = {}
    for id_type in value_types:
        if id_type in ("float", "double"):
            continue
        for shared in (False, True):
            sources[f"scatter[count,{id_type},{shared}]"] = scatter_source(
                "count", id_type, None, shared
            )
            for mode in ("add_int", "add_float", "min", "max"):
                for value_type in value_types:
                    if mode == "add_int" and value_type in ("float", "double"):
                        continue
                    sources[f"scatter[{mode},{id_type},{value_type},{shared}]"] = scatter_source(
                        mode, id_type, value_type, shared
                    )
    for combine in PIECE_COMBINES:
        for acc in PIECE_ACCS:
            for value_type in value_types:
                if acc == "c128" and value_type not in ("float", "double"):
                    continue
                if acc == "u64" and value_type in ("float", "double"):
                    continue
                for ordered in (False, True):
                    for from_acc in (False, True):
                        name = f"pieces[{combine},{acc},{value_type},{ordered},{from_acc}]"
                        sources[name] = fold_pieces_source(
                            combine, acc, value_type, ordered, from_acc
                        )
    for fold in JOINT_FOLDS:
        for value_type in joint_value_types(fold):
            for ordered, gathered in ((False, False), (True, False), (True, True)):
                name = f"joint[{fold},{value_type},{ordered},{gathered}]"
                sources[name] = joint_source(fold, value_type, ordered, gathered)
    return sources


# --- seg_joint -------------------------------------------------------------------------------

#: C types of the raw values first/last copy, by item size: a copy keeps every bit (NaN
#: payloads, -0.0), and complex128 moves as one 16-byte pair.
RAW_TYPES: dict[int, str] = {
    1: "unsigned char",
    2: "unsigned short",
    4: "unsigned int",
    8: "unsigned long long",
    16: "raw16",
}

#: ``(a0, a1, a2)`` C types of each joint fold's intermediates (in the op's order), the
#: positions it reads (``all``, ``first`` or ``last`` of the segment's run), and its C code:
#: ``begin`` loads the state of element ``out``, ``step`` folds value ``v`` of global row
#: ``row``, ``end`` stores the state. ``val_t`` is the value type.
_JOINT: dict[str, tuple[tuple[str, str, str], str, str, str, str]] = {
    # var/std: sums of values shifted by the segment's first value (count 0 before: fresh).
    "moments": (
        ("double", "double", "double"),
        "all",
        "double shift = a0[out], sum = a1[out], squares = a2[out]; bool fresh = count[g] == 0;",
        "const double x = (double)v;"
        " if (fresh) { shift = x; fresh = false; }"
        " const double d = x - shift; sum += d; squares += d * d + (x - x);",
        "a0[out] = shift; a1[out] = sum; a2[out] = squares;",
    ),
    # argmin/argmax: the first row of a strictly better value; the first NaN wins and stays.
    "argmin": (
        ("val_t", "long long", "long long"),
        "all",
        "val_t best = a0[out]; long long at = a1[out];",
        "if (at < 0) { best = v; at = row; }"
        " else if (best != best) break;"
        " else if (v != v || v < best) { best = v; at = row; }",
        "a0[out] = best; a1[out] = at;",
    ),
    "argmax": (
        ("val_t", "long long", "long long"),
        "all",
        "val_t best = a0[out]; long long at = a1[out];",
        "if (at < 0) { best = v; at = row; }"
        " else if (best != best) break;"
        " else if (v != v || v > best) { best = v; at = row; }",
        "a0[out] = best; a1[out] = at;",
    ),
    # first/last: the value of the smallest (largest) row; a run's rows ascend, so only its
    # first (last) position can win.
    "first": (
        ("val_t", "long long", "long long"),
        "first",
        "val_t picked = a0[out]; long long at = a1[out];",
        "if (row < at) { picked = v; at = row; }",
        "a0[out] = picked; a1[out] = at;",
    ),
    "last": (
        ("val_t", "long long", "long long"),
        "last",
        "val_t picked = a0[out]; long long at = a1[out];",
        "if (row > at) { picked = v; at = row; }",
        "a0[out] = picked; a1[out] = at;",
    ),
    # logsumexp: the max of the values left out of the sum (NaN sticks), and sum(exp(x)) as
    # sum * 2**scale, each exp(x) taken as m * 2**e with e = ops.scale_of(x) (0 for a plain
    # value, whose m is exp(x) itself); moving the sum to a larger scale is exact.
    "logsumexp": (
        ("double", "long long", "double"),
        "all",
        "double top = a0[out]; long long scale = a1[out]; double sum = a2[out];",
        "const double x = (double)v;"
        " if (!(fabs(x) < LARGEST_SCALED)) {"
        " if (top == top && (x != x || x > top)) top = x; }"
        " else {"
        " const double e = fabs(x) < PLAIN_EXP ? 0.0 : rint(x / LN2);"
        " const double m = exp(x - e * LN2);"
        " const long long at = (long long)e;"
        " if (at > scale) { sum = ldexp(sum, shift_of(scale - at)); scale = at; }"
        " sum += ldexp(m, shift_of(at - scale)); }",
        "a0[out] = top; a1[out] = scale; a2[out] = sum;",
    ),
}

#: The joint folds ``seg_joint`` implements (:attr:`segcli.ops.Op.joint` names).
JOINT_FOLDS = tuple(_JOINT)

#: The positions a joint fold reads, as the first and the end of its loop over a run.
_RANGES = {"all": ("begin", "stop"), "first": ("begin", "begin + 1"), "last": ("stop - 1", "stop")}


def joint_value_types(fold: str) -> tuple[str, ...]:
    """The value types ``seg_joint`` reads for ``fold``: raw bits for first/last, numbers (after
    float16 is widened) for the others."""
    if fold in ("first", "last"):
        return tuple(RAW_TYPES.values())
    return tuple(sorted(set(C_TYPES.values())))


def joint_source(fold: str, value_type: str, ordered: bool, gathered: bool) -> str:
    """``seg_joint``: thread (p, c) folds column c of the run of positions
    ``starts[p] .. starts[p+1]-1``, all of segment ``segs[p]``, in position order, into element
    ``segs[p] * width + c`` of the intermediates ``a0``, ``a1``, ``a2`` (``n * width`` each;
    ``a2`` unused by two-intermediate folds).

    Position k is block row ``order[k]`` when ``ordered`` (the stable sort's permutation), else
    row k; its global row is ``first_row`` plus that. Its value is row ``order[k]`` of ``src``
    (``rows * width`` values of ``value_type``), or row k when ``gathered`` (``src`` already in
    position order). ``count`` is each segment's row count before this block (moments: a
    segment with none takes its first value as the shift). Each segment has one run, so no two
    threads touch one element.
    """
    if fold not in _JOINT or value_type not in set(C_TYPES.values()) | set(RAW_TYPES.values()):
        raise ValueError(f"no joint fold {fold} of {value_type}")
    if gathered and not ordered:
        raise ValueError("gathered values need the order they were gathered in")
    (a0, a1, a2), reads, begin, step, end = _JOINT[fold]
    loop_from, loop_to = _RANGES[reads]
    return "\n".join(
        [
            _COMMON,
            "struct raw16 { unsigned long long lo, hi; };",
            f"typedef {value_type} val_t;",
            f"typedef {a0} a0_t;",
            f"typedef {a1} a1_t;",
            f"typedef {a2} a2_t;",
            f"#define ORDERED {1 if ordered else 0}",
            f"#define GATHERED {1 if gathered else 0}",
            f"#define LN2 {math.log(2)!r}",
            f"#define LARGEST_SCALED {LARGEST_SCALED!r}",
            f"#define PLAIN_EXP {PLAIN_EXP!r}",
            # ops.rescaled's clamp: shifts below -2000 flush every sum to zero anyway.
            "__device__ __forceinline__ int shift_of(long long s) "
            "{ return s < -2000 ? -2000 : (int)s; }",
            r"""
extern "C" __global__ void seg_joint(
    const val_t* __restrict__ src, const long long* __restrict__ order,
    const long long* __restrict__ starts, const long long* __restrict__ segs,
    const long long* __restrict__ count, a0_t* a0, a1_t* a1, a2_t* a2,
    long long pieces, long long width, long long first_row)
{
    const long long total = pieces * width;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        const long long p = t / width;
        const long long c = t - p * width;
        const long long g = segs[p];
        const long long out = g * width + c;
        const long long begin = starts[p], stop = starts[p + 1];
        (void)begin, (void)stop;  // first/last read one end of the run only
        """
            + begin
            + f"""
        // As in seg_fold_pieces: several loads in flight, the steps still in position order.
#pragma unroll 8
        for (long long k = {loop_from}; k < {loop_to}; ++k) {{"""
            + r"""
            const long long local = ORDERED ? order[k] : k;
            const val_t v = src[(GATHERED ? k : local) * width + c];
            const long long row = first_row + local;
            (void)row;  // moments and logsumexp do not need it
            """
            + step
            + r"""
        }
        """
            + end
            + r"""
    }
}
""",
        ]
    )
