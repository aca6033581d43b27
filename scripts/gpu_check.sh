#!/usr/bin/env bash
# The one command to run on a GPU machine: checks the CuPy engine end to end and writes a report.
#
#   bash scripts/gpu_check.sh            # full benchmark sizes (about 3-5 minutes on an H200)
#   bash scripts/gpu_check.sh --quick    # small benchmark sizes
#
# Python: $PYTHON if set; else python3 when it already imports CuPy (GPU images ship it, and
# may have no network); else a fresh venv (.venv-gpu) with `pip install -e '.[test,gpu]'`.
# Writes ${OUT:-gpu_report}/gpu_report.md plus one log per step beside it. Every step has a
# time limit and all of them share a budget of $GPU_CHECK_BUDGET seconds (default 450), so the
# script ends well under 8 minutes; a failing step is reported and the script goes on, exiting
# non-zero at the end if any step failed.

set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
DEST="${OUT:-gpu_report}"
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
REPORT="$DEST/gpu_report.md"
QUICK=""
[[ "${1:-}" == "--quick" ]] && QUICK="--quick"
export PYTHONUNBUFFERED=1
FAILED=()
STARTED=$SECONDS
BUDGET=${GPU_CHECK_BUDGET:-450}

# step NAME LIMIT_SECONDS COMMAND...: runs COMMAND with a time limit (cut to what is left of
# the budget), logs to $DEST/NAME.log.
step() {
    local name=$1 limit=$2
    shift 2
    local begun=$SECONDS
    local left=$((BUDGET - (SECONDS - STARTED)))
    if ((left < 15)); then
        echo "=== $name: skipped, the time budget is spent" | tee "$DEST/$name.log"
        FAILED+=("$name (skipped: time budget spent)")
        return 0
    fi
    ((limit > left)) && limit=$left
    echo "=== $name (limit ${limit}s)"
    timeout --kill-after=10 "$limit" "$@" >"$DEST/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$DEST/$name.log"
    echo "=== $name: exit $rc in $((SECONDS - begun))s"
    [[ $rc -ne 0 ]] && FAILED+=("$name (exit $rc)")
    return 0
}

# --- Python with CuPy -------------------------------------------------------------------------
PY="${PYTHON:-python3}"
if "$PY" -c "import cupy" >/dev/null 2>&1; then
    SETUP="using $(command -v "$PY") with its own CuPy; segcli from the source tree"
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
    SETUP="fresh venv .venv-gpu with pip install -e '.[test,gpu]'"
    "$PY" -m venv .venv-gpu && PY="$ROOT/.venv-gpu/bin/python"
    step install 300 "$PY" -m pip install -q -e '.[test,gpu]'
fi
echo "$SETUP"

# --- the device -------------------------------------------------------------------------------
INFO=$(mktemp /tmp/segcli_device_info.XXXXXX)  # outside $DEST: only logs come back
cat >"$INFO" <<'EOF'
import sys

import cupy
import numpy

print("python", sys.version.split()[0], "numpy", numpy.__version__, "cupy", cupy.__version__)
print("CUDA runtime", cupy.cuda.runtime.runtimeGetVersion(),
      "driver", cupy.cuda.runtime.driverGetVersion())
device = cupy.cuda.Device()
props = cupy.cuda.runtime.getDeviceProperties(device.id)
name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
print("device", device.id, name, "compute capability", device.compute_capability,
      "SMs", props["multiProcessorCount"], "memory GiB", round(props["totalGlobalMem"] / 2**30, 1))
from segcli.engines import get_engine

print("segcli engine:", get_engine("cupy").name)
EOF
# shellcheck disable=SC2016  # $0 and $1 expand in the inner shell
step device 30 bash -c 'nvidia-smi; "$0" "$1"' "$PY" "$INFO"

# --- tests and benchmark ------------------------------------------------------------------------
# The newest kernels first, so they are checked even when a later step runs out of budget:
# every seg_joint variant compiles with NVRTC (tests_cpu compiles the other families), then
# the device tests of the ops of issue 14 (seg_joint's var/std, argmin/argmax, first/last,
# logsumexp, and any/all): tests/test_gpu.py's edge and block tests and the cupy cases of
# tests/test_stats.py.
step nvrtc 90 "$PY" -m pytest -q -rs -p no:cacheprovider \
    "tests/test_gpu.py::test_every_kernel_source_compiles_with_nvrtc[joint]"
step tests_new_ops 150 "$PY" -m pytest -m gpu tests/test_gpu.py tests/test_stats.py \
    -k "joint or test_stats" -q -rs -p no:cacheprovider
# Every other device test: the engine-parametrised suite's cupy cases (conftest marks them gpu,
# the new ops among them) and tests/test_gpu.py's device tests.
step tests_gpu 200 "$PY" -m pytest -m gpu tests --ignore=tests/test_stats.py -k "not joint" \
    -q -rs -p no:cacheprovider
step bench 150 "$PY" benchmarks/gpu_bench.py $QUICK --out "$DEST/gpu_bench.md" --tmp "${TMPDIR:-/tmp}"
# The rest of the suite in this environment (CPU engines; NVRTC compiles every kernel variant).
step tests_cpu 100 "$PY" -m pytest -m "not gpu" tests -q -rs -p no:cacheprovider

# --- report -------------------------------------------------------------------------------------
summary() {  # the pytest summary line of a log, or a note
    local line
    line=$(grep -E "[0-9]+ (passed|failed|skipped|deselected|errors?)\b|no tests ran" "$1" \
        2>/dev/null | tail -n 1)
    echo "${line:-(no summary)}"
}
{
    echo "# segcli GPU check"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $((SECONDS - STARTED)) s, $SETUP."
    echo
    echo "## Device"
    echo
    echo '```'
    grep -E "^(python|CUDA|device|segcli)|NVIDIA-SMI|H200|H100|MiB" "$DEST/device.log" | head -n 12
    echo '```'
    echo
    echo "## Tests"
    echo
    echo "- every seg_joint variant compiles with NVRTC: $(summary "$DEST/nvrtc.log")"
    echo "- the new ops' edge and block tests, tests/test_stats.py on cupy:" \
        "$(summary "$DEST/tests_new_ops.log")"
    echo "- \`pytest -m gpu tests\` (every other cupy case): $(summary "$DEST/tests_gpu.log")"
    echo "- \`pytest -m 'not gpu' tests\`: $(summary "$DEST/tests_cpu.log")"
    failures=$(grep -hE "^(FAILED|ERROR) " "$DEST"/{nvrtc,tests_new_ops,tests_gpu,tests_cpu}.log \
        2>/dev/null)
    if [[ -n "$failures" ]]; then
        echo
        echo "Failures (details in nvrtc.log, tests_new_ops.log, tests_gpu.log, tests_cpu.log):"
        echo
        echo '```'
        echo "$failures" | sort -u | head -n 60
        echo '```'
    fi
    echo
    echo "## Benchmark"
    echo
    if [[ -s "$DEST/gpu_bench.md" ]]; then
        sed 's/^## /### /' "$DEST/gpu_bench.md"
    else
        echo "(no benchmark output; see bench.log)"
        echo '```'
        tail -n 30 "$DEST/bench.log"
        echo '```'
    fi
    echo
    echo "## Steps that failed"
    echo
    if [[ ${#FAILED[@]} -eq 0 ]]; then echo "none"; else printf -- '- %s\n' "${FAILED[@]}"; fi
    echo
    # shellcheck disable=SC2012  # our own plain file names
    echo "Logs: $(cd "$DEST" && ls ./*.log | tr '\n' ' ')"
} >"$REPORT"

echo
cat "$REPORT"
echo
echo "report: $REPORT ($((SECONDS - STARTED)) s)"
[[ ${#FAILED[@]} -eq 0 ]]
