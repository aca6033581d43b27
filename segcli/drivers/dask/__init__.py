"""``--engine dask``: one reduction over many files, map-reduced on a Dask cluster.

The structure mirrors :mod:`segcli.drivers.stream`, with partitions instead of blocks:

1. plan on the client from metadata only (:mod:`segcli.drivers.dask.plan`): the files, how DATA
   and IDS shards pair up, the partitions, and every check that needs no rows;
2. map: one task per partition reads its own rows, summarises its ids and folds its rows into
   the op's partial state (:mod:`segcli.drivers.dask.tasks`);
3. combine: partial results merge in a tree on the workers, earlier partitions first, so the
   order is the same run after run; where the bits of a fold depend on its order (a float
   sum), partitions fold in a chain instead, each continuing the state of those before, which
   gives the single machine's bytes (:mod:`segcli.drivers.dask.tasks`);
4. the client fetches the merged id summary, validates (:mod:`segcli.validate`: the
   same counts and first offender as a one-pass scan, named by file and row), and only then
   fetches the state, O(n x inner), and finalizes it.

When n is not given each partition's state covers the ids it holds and states are padded as
they merge (empty segments are the op's identity), so the ids are read once, not twice.

``--by`` runs take the same steps with key columns instead of IDS
(:mod:`segcli.drivers.dask.keyed`): partial states are merged by key.

Dask is imported only inside functions: this module is loaded for ``--engine dask`` alone, and
a missing Dask is an :class:`~segcli.errors.EngineUnavailableError` with the install hint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import socket
import struct
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from segcli import ops, validate
from segcli.core import Reduction, check_before_rows, check_output_fits
from segcli.drivers.base import (
    DriverResult,
    InputFacts,
    Progress,
    RunSpec,
    input_facts,
    op_and_fill,
)
from segcli.drivers.dask.plan import (
    Dataset,
    Partition,
    Plan,
    check_pairs,
    expand,
    open_dataset,
    plan_partitions,
)
from segcli.drivers.dask.tasks import (
    Job,
    PartResult,
    combine_results,
    count_partition_nulls,
    fold_rows,
    id_summary_of,
    nulls_error,
    order_matters,
    read_partition_rows,
    run_partition,
)
from segcli.errors import (
    ClusterError,
    EngineUnavailableError,
    InvalidInputError,
    SegcliError,
    UsageError,
)
from segcli.io.columns import NullIdsError, NullsError, nulls_kept
from segcli.io.formats import first_line, input_format
from segcli.signals import checkpoint
from segcli.validate import IdSummary, Locator, index_text, report

#: ``distributed.Client`` and ``distributed.Future``: its typing is partial, so they stay Any.
Client = Any
Future = Any

#: Seconds to wait for a scheduler to answer, and for it to have at least one worker.
CONNECT_TIMEOUT_S = 10
#: Dask re-runs a task that raised this many more times (a worker that dies is handled apart:
#: the scheduler reschedules its tasks, up to ``distributed.scheduler.allowed-failures``).
RETRIES = 2
#: Partial results merged per combine task.
FAN_IN = 8


def run(
    spec: RunSpec, progress: Progress | None = None, *, client: Client | HeldCluster | None = None
) -> DriverResult:
    """Reduce the files of ``spec`` on a Dask cluster; nothing is written here.

    The cluster is ``client``'s (left running; a :class:`HeldCluster` too), else the scheduler
    at ``spec.scheduler`` or ``$DASK_SCHEDULER_ADDRESS``, else a local cluster started and
    closed here. The mode's facts are ``{"partitions", "workers"}``. ``progress(ids_done,
    ids_total)`` is called as partition tasks finish.
    """
    _distributed()
    if spec.by:
        from segcli.drivers.dask import keyed

        return keyed.run(spec, progress, client=client)
    try:
        plan = plan_run(spec)
    except NullsError as error:
        raise planned_nulls(lambda: plan_run(spec).partitions, spec.sorted_ids, error) from None
    chosen, fill = op_and_fill(spec, plan.data.dtype, _inner(plan), plan.data.label)
    op = ops.get_op(chosen)
    n = _check_inputs(spec, op, plan, fill)
    job = Job(op, n, spec.sorted_ids, int(np.prod(plan.data.shape, dtype=np.int64)))
    started = time.perf_counter()
    with _cluster(spec, client) as (reached, where):
        workers = len(reached.nthreads())
        connected = time.perf_counter()
        try:
            id_report, state, engines, null_ids = _map_reduce(reached, plan, job, op, progress)
        except (NullsError, NullIdsError) as error:
            raise counted_nulls(reached, plan.partitions, op, spec.sorted_ids, error) from None
        reduction = Reduction.finish(
            state,
            id_report,
            sorted_ids=spec.sorted_ids,
            engine="dask",
            engine_reason=f"{where}; partitions on {', '.join(sorted(engines)) or 'no engine'}",
            fill=fill,
            # Starting (or reaching) the cluster is paid once per run; "compute" is the work.
            timings={"cluster": connected - started},
        )
        reduction.timings["compute"] = time.perf_counter() - connected
        reduction.null_ids = null_ids
    return DriverResult(
        reduction,
        _facts(plan.data),
        _facts(plan.ids),
        "distributed",
        {"partitions": len(plan.partitions), "workers": workers},
        dict(reduction.timings),
    )


@dataclasses.dataclass(frozen=True)
class HeldCluster:
    """A cluster held open across several runs (agg's data columns): its client, and how the
    summary names it (a local cluster as such, not by its scheduler's address)."""

    client: Client
    where: str


def run_columns(
    spec: RunSpec, columns: list[str], progress: Progress | None = None
) -> list[DriverResult]:
    """Each of DATA's ``columns`` reduced by ``spec``'s ops, one run each, all on one cluster:
    a local cluster is started once, or the scheduler reached once, not once per column."""
    _distributed()
    started = time.perf_counter()
    with _cluster(spec, None) as (client, where):
        held = HeldCluster(client, where)
        opened = time.perf_counter() - started
        with nulls_kept(spec.skipna):  # as carry_out runs a driver: a null is a missing value
            runs = [
                run(dataclasses.replace(spec, data_column=column), progress, client=held)
                for column in columns
            ]
    # Starting the cluster was paid once, before the first column.
    for timings in (runs[0].timings, runs[0].reduction.timings):
        timings["cluster"] = timings.get("cluster", 0.0) + opened
    return runs


def _distributed() -> Any:
    """The ``distributed`` module, or the engine error with the install hint."""
    try:
        import distributed
    except ImportError as exc:
        raise EngineUnavailableError(
            f"engine 'dask' is not available ({exc}); install it with: pip install "
            "'segcli[dask]' (or '.[dask]' in a segcli checkout)"
        ) from None
    return distributed


# ---------------------------------------------------------------------------------------------
# Planning and the checks that need no rows


def plan_run(spec: RunSpec) -> Plan:
    """The files of DATA and IDS, paired, and their partitions."""
    if spec.ids is None:
        paths = expand(spec.data)
        _check_one_source(spec, paths[0])
        data = open_dataset(
            spec.data, column=spec.data_column, key=spec.data_key, role="data", paths=paths
        )
        ids = open_dataset(
            spec.data, column=spec.ids_column, key=spec.ids_key, role="ids", paths=paths
        )
    else:
        data = open_dataset(spec.data, column=spec.data_column, key=spec.data_key, role="data")
        ids = open_dataset(spec.ids, column=spec.ids_column, key=spec.ids_key, role="ids")
        check_pairs(data, ids)
    partitions = plan_partitions(data, ids, rows_per_partition=spec.block_rows)
    return Plan(data, ids, partitions)


def _check_one_source(spec: RunSpec, first: str) -> None:
    """DATA and IDS from the same files need both columns (tables) or both keys (archives)."""
    fmt = input_format(first)
    if fmt == "npy":
        raise UsageError(f"{spec.data}: a .npy file holds one array; give IDS as a second input")
    if fmt == "npz":
        pairs = (("--data-key", spec.data_key), ("--ids-key", spec.ids_key))
        what = "archive"
    else:
        pairs = (("--data-column", spec.data_column), ("--ids-column", spec.ids_column))
        what = "table"
    missing = " and ".join(option for option, value in pairs if value is None)
    if missing:
        raise UsageError(f"{spec.data}: DATA and IDS from one {what} need {missing}")


def _check_inputs(spec: RunSpec, op: ops.Op, plan: Plan, fill: Any) -> int | None:
    """Every check of docs/semantics.md that metadata answers, before any worker reads a row."""
    data, ids = plan.data, plan.ids
    return check_before_rows(
        op,
        (data.shape, data.dtype),
        (ids.shape, ids.dtype),
        spec.num_segments,
        sorted_ids=spec.sorted_ids,
        fill=fill,
        data_label=data.label,
        ids_label=ids.label,
    )


def _inner(plan: Plan) -> tuple[int, ...]:
    return tuple(plan.data.shape[len(plan.ids.shape) :])


def _facts(dataset: Dataset) -> InputFacts:
    notes = {ref.note for ref in dataset.files}
    note = notes.pop() if len(notes) == 1 else None
    return input_facts(
        dataset.pattern, dataset.label, dataset.fmt, dataset.shape, dataset.dtype, note
    )


# ---------------------------------------------------------------------------------------------
# The cluster


@contextlib.contextmanager
def _cluster(spec: RunSpec, given: Client | HeldCluster | None) -> Iterator[tuple[Client, str]]:
    """The caller's client, a client of ``spec``'s scheduler (``--scheduler``, else
    ``$DASK_SCHEDULER_ADDRESS``), or a local cluster's;
    Dask's own log lines held back meanwhile (:func:`quiet_dask_logging`)."""
    with quiet_dask_logging():
        if isinstance(given, HeldCluster):
            yield given.client, given.where
            return
        if given is not None:
            yield given, f"scheduler {given.scheduler.address}"
            return
        # An empty --scheduler is an address, a malformed one: not "none given", which would
        # run on a local cluster where a script's unset variable meant a remote one.
        address = spec.scheduler
        if address is None:
            address = os.environ.get("DASK_SCHEDULER_ADDRESS") or None
        with _own_cluster(address) as (client, where):
            yield client, where


#: Loggers of Dask and of the libraries it runs on.
_DASK_LOGGERS = frozenset({"distributed", "dask", "tornado", "bokeh"})


@contextlib.contextmanager
def quiet_dask_logging() -> Iterator[None]:
    """Hold back Dask's log lines, which it prints to stderr beside segcli's one line: a lost
    worker's warning, a lost scheduler's reconnection tracebacks. What goes wrong reaches the
    user as segcli's own error line (:func:`_cluster_failure`). Restored afterwards, for a
    library caller's logging."""
    loggers = [
        logger
        for name, logger in list(logging.root.manager.loggerDict.items())
        if isinstance(logger, logging.Logger) and name.split(".")[0] in _DASK_LOGGERS
    ]
    # Dask's handlers: a child logger made during the run still reaches them (and a record
    # that reaches none would go to logging's last resort, which prints warnings).
    handlers = {handler for logger in loggers for handler in logger.handlers}
    disabled = [(logger, logger.disabled) for logger in loggers]
    last_resort = logging.lastResort
    for logger in loggers:
        logger.disabled = True
    for handler in handlers:
        handler.addFilter(_drop)
    logging.lastResort = logging.NullHandler()
    try:
        yield
    finally:
        logging.lastResort = last_resort
        for handler in handlers:
            handler.removeFilter(_drop)
        for logger, was in disabled:
            logger.disabled = was


def _drop(record: logging.LogRecord) -> bool:
    return False


@contextlib.contextmanager
def _own_cluster(address: str | None) -> Iterator[tuple[Client, str]]:
    """A client of the scheduler at ``address``, or of a local cluster started here."""
    if address is not None:
        client = connect(address)
        try:
            yield client, f"scheduler {address}"
        finally:
            client.close()
        return
    cluster = local_cluster()
    try:
        client = _distributed().Client(cluster, set_as_default=False)
        checkpoint("local-cluster")
        try:
            yield client, f"local cluster, {len(cluster.workers)} workers"
        finally:
            client.close()
    finally:
        cluster.close()


def connect(address: str, timeout_s: float | None = None) -> Client:
    """A client of a running scheduler that has at least one worker, within a bounded time."""
    timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    probe_scheduler(address, timeout_s)
    try:
        client = _distributed().Client(address, timeout=f"{timeout_s}s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise EngineUnavailableError(
            f"cannot reach Dask scheduler at {address} within {timeout_s:g} s"
        ) from exc
    except (ValueError, TypeError) as exc:
        raise UsageError(f"bad Dask scheduler address {address!r} ({first_line(exc)})") from exc
    try:
        # Tasks sent to a scheduler without workers would wait forever.
        client.wait_for_workers(1, timeout=timeout_s)
    except (OSError, TimeoutError) as exc:
        client.close()
        raise EngineUnavailableError(
            f"Dask scheduler at {address} has no workers (waited {timeout_s:g} s); start "
            f"one with: dask worker {address}"
        ) from exc
    return client


#: Port a scheduler listens on when an address names none (Dask's own default).
DEFAULT_SCHEDULER_PORT = 8786
#: Host names and IP addresses (v4, or v6 without brackets, as Dask's parser leaves them).
_HOST = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.%]+")
#: A URL scheme (RFC 3986): what Dask takes for one before "://" may be a typo instead.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
#: A scheduler's first message (its handshake) is a few hundred bytes in a few frames.
_HANDSHAKE_MAX_BYTES = 1 << 20
_HANDSHAKE_MAX_FRAMES = 64


def probe_scheduler(address: str, timeout_s: float) -> None:
    """Check within ``timeout_s`` that a Dask scheduler answers on a ``tcp://`` address, before
    Dask's client is given it: the client waits forever on an HTTP port (the dashboard's) and
    takes any other bytes for a frame length, allocating gigabytes. ``tls://`` is left to Dask
    (its TLS configuration); other schemes are refused at once: ``inproc://`` names a scheduler
    inside one process, and Dask retries ``ucx://`` or ``ws://`` until its timeout, or fails
    with its own internals' words."""
    from distributed.comm.addressing import parse_address, parse_host_port

    malformed = UsageError(
        f"bad Dask scheduler address {address!r} (expected tcp://HOST:PORT, e.g. "
        f"tcp://127.0.0.1:{DEFAULT_SCHEDULER_PORT})"
    )
    try:
        scheme, location = parse_address(address)
        if scheme == "tls":
            return
        if scheme != "tcp" and _SCHEME.fullmatch(scheme):
            raise UsageError(
                f"bad Dask scheduler address {address!r} (segcli reaches a scheduler over "
                f"tcp://HOST:PORT, or tls:// with Dask's TLS configuration; not {scheme}://)"
            )
        if scheme != "tcp":  # " tcp", a space pasted in: no scheme at all
            raise malformed
        host, port = parse_host_port(location, DEFAULT_SCHEDULER_PORT)
    except (ValueError, TypeError):
        # Dask's parser says "invalid literal for int()" of a port that is empty or "8786/".
        raise malformed from None
    if not _HOST.fullmatch(host) or not 0 < int(port) < 65536:
        raise malformed
    head = _first_bytes(address, host, int(port), 16, timeout_s)
    total, frames = struct.unpack("<QQ", head)
    if not (16 <= total <= _HANDSHAKE_MAX_BYTES and 1 <= frames <= _HANDSHAKE_MAX_FRAMES):
        raise ClusterError(
            f"{address} is not a Dask scheduler: it answered {head!r} (the scheduler's port, "
            f"{DEFAULT_SCHEDULER_PORT} by default, is not the dashboard's)"
        )


def _first_bytes(address: str, host: str, port: int, size: int, timeout_s: float) -> bytes:
    """The first ``size`` bytes the server at ``host:port`` sends unasked, within the bound."""
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            head = b""
            while len(head) < size:
                sock.settimeout(max(0.001, deadline - time.monotonic()))
                part = sock.recv(size - len(head))
                if not part:
                    break
                head += part
    except socket.gaierror as exc:
        # A usage error (exit 2), as a malformed address is: nothing of a cluster was reached.
        raise UsageError(f"cannot resolve Dask scheduler host {host!r} ({exc.strerror})") from None
    except TimeoutError:
        raise ClusterError(
            f"no Dask scheduler answered at {address} within {timeout_s:g} s (an HTTP port, "
            f"such as the dashboard's? the scheduler's is {DEFAULT_SCHEDULER_PORT} by default)"
        ) from None
    except OSError as exc:  # refused, unreachable: said by the system, not a wait that ran out
        raise EngineUnavailableError(
            f"cannot reach Dask scheduler at {address} ({exc.strerror or first_line(exc)}); "
            "is it running?"
        ) from exc
    if len(head) < size:
        raise ClusterError(f"{address} closed the connection: not a Dask scheduler")
    return head


#: What a cluster segcli starts for itself leaves out: nobody reads its workers' profiles
#: (sampled every 10 ms, for the dashboard it has not) or the warnings of its event-loop check
#: (every 20 ms, logged below the level it logs at). An idle two-worker cluster took about
#: 0.15 s of CPU a second with them, a third of that without.
PRIVATE_CLUSTER_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
}


def local_cluster(n_workers: int | None = None, **options: Any) -> Any:
    """A ``LocalCluster`` of worker processes (one per core), on loopback, without a dashboard.

    The scheduler's HTTP server (health checks) still runs: on a free loopback port, since the
    default 8787 may be taken by another cluster.
    """
    settings: dict[str, Any] = {
        "n_workers": n_workers or _cores(),
        "threads_per_worker": 1,  # the engines fold in one thread; processes sidestep the GIL
        "processes": True,
        "host": "127.0.0.1",
        "dashboard_address": "127.0.0.1:0",
        "scheduler_kwargs": {"dashboard": False},
        # A task that meets bad input fails with a SegcliError the client reports in one line;
        # the workers must not also log it with a traceback (at ERROR) on the same terminal.
        "silence_logs": logging.CRITICAL,
        **options,
    }
    distributed = _distributed()
    import dask

    cluster = None
    try:
        # Read as the scheduler, the nannies and their first workers start; a worker started
        # later, in place of one that died, runs with Dask's defaults.
        with dask.config.set(PRIVATE_CLUSTER_CONFIG), _children_without_stderr():
            cluster = distributed.LocalCluster(**settings)
    except Exception as exc:  # Dask raises many types here; the user needs one line.
        raise EngineUnavailableError(
            f"cannot start a local Dask cluster ({type(exc).__name__}: {first_line(exc)}); "
            "give --scheduler ADDRESS to use a running one"
        ) from exc
    except BaseException:  # a Ctrl-C as it started: the workers go with it
        if cluster is not None:
            with contextlib.suppress(Exception):
                cluster.close()
        raise
    return cluster


@contextlib.contextmanager
def _children_without_stderr() -> Iterator[None]:
    """Processes started meanwhile (the workers, multiprocessing's resource tracker) write
    their stderr to /dev/null.

    A terminal's Ctrl-C goes to every process of the foreground group: each worker would end
    with a KeyboardInterrupt traceback, one starting up with one from multiprocessing, on the
    terminal segcli reports on in one line. The workers' logs are off already (their failures
    reach the client as task errors). segcli itself writes nothing while the cluster starts.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield  # no stderr to keep: nothing to hide it from
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _cores() -> int:
    # sched_getaffinity honours CPU limits (containers, taskset); cpu_count does not.
    getaffinity = getattr(os, "sched_getaffinity", None)
    return max(1, len(getaffinity(0)) if getaffinity else os.cpu_count() or 1)


# ---------------------------------------------------------------------------------------------
# Map, combine, validate, fetch


def _map_reduce(
    client: Client, plan: Plan, job: Job, op: ops.Op, progress: Progress | None
) -> tuple[validate.IdReport, ops.State, frozenset[str], int]:
    """Run the tasks; validate from the merged summary; fetch the merged state of n segments."""
    token = uuid.uuid4().hex[:12]  # task keys unique per run on a shared scheduler
    tasks, root = submit_partitions(
        client,
        plan,
        job,
        token,
        chained=order_matters(op, plan.data.dtype),
        each=(run_partition, combine_results),
        chain=(read_partition_rows, fold_rows),
    )
    ids_future = client.submit(id_summary_of, root, key=f"segcli-ids-{token}", retries=RETRIES)
    try:
        _follow(client, tasks, plan.ids_per_row, plan.ids_per_row * plan.ids.shape[0], progress)
        id_summary: IdSummary = _outcome(ids_future, "combining the partitions")
        id_report = report(
            id_summary, job.num_segments, sorted_ids=job.sorted_ids, locate=_locator(plan)
        )
        n = id_report.num_segments
        # The client's memory now.
        check_output_fits(
            op,
            n,
            _inner(plan),
            plan.data.dtype,
            sorted_ids=job.sorted_ids,
            inferred=id_report.inferred,
        )
        merged: PartResult = _outcome(root, "combining the partitions")
        if merged.too_large is not None:  # a worker's memory, with the ids found valid
            raise InvalidInputError(merged.too_large)
    finally:
        # Release every key now, whatever happened: an exception's traceback would keep these
        # futures alive, and a shared cluster would keep (and recompute) their tasks. (Not
        # client.cancel: cancelling a task and its dependents in one call trips an assertion
        # in the scheduler.)
        for future in (*tasks, root, ids_future):
            future.release()
    state = merged.state or ops.new_state(
        op, n, _inner(plan), plan.data.dtype, sorted_ids=job.sorted_ids
    )
    return id_report, state.grown(n), merged.engines, merged.null_ids


def submit_partitions(
    client: Client,
    plan: Plan,
    job: Any,
    token: str,
    *,
    chained: bool,
    each: tuple[Any, Any],
    chain: tuple[Any, Any],
) -> tuple[dict[Future, Partition], Future]:
    """The partition tasks (each future with its partition) and the future of their merged
    result. ``chained``: a fold whose bits depend on its order, so the partitions fold one
    after another (``chain``: read, fold on); else each partition is folded by a task of its
    own and the states merge in a tree (``each``: fold one, combine)."""
    if chained:
        read, fold_on = chain
        return _fold_chain(client, plan.partitions, token, read, fold_on, job)
    run_one, combine = each
    tasks = {
        client.submit(
            run_one, part, job, key=f"segcli-partition-{token}-{part.index}", retries=RETRIES
        ): part
        for part in plan.partitions
    }
    return tasks, _combine_tree(client, list(tasks), token, combine)


def _combine_tree(
    client: Client, futures: list[Future], token: str, combine: Any = combine_results
) -> Future:
    """Merge neighbours ``FAN_IN`` at a time, level by level, keeping row order.

    The root is always a combine task, even over one partition, so that the client can release
    every partition future as soon as it has finished.
    """
    level = 0
    while level == 0 or len(futures) > 1:
        futures = [
            client.submit(
                combine,
                *futures[i : i + FAN_IN],
                key=f"segcli-combine-{token}-{level}-{i // FAN_IN}",
                retries=RETRIES,
            )
            for i in range(0, len(futures), FAN_IN)
        ]
        level += 1
    return futures[0]


#: Partitions read ahead of the fold chain, per worker: their rows wait in workers' memory.
READ_AHEAD_PER_WORKER = 2


def _fold_chain(
    client: Client,
    partitions: tuple[Partition, ...],
    token: str,
    read: Any,
    fold: Any,
    job: Any,
) -> tuple[dict[Future, Partition], Future]:
    """Read the partitions in parallel and fold their rows one after another, each fold task
    continuing the state of the ones before: the single machine's order of every fold (see
    :mod:`.tasks`). Returns the read tasks and the last fold.

    A read waits for the fold a few partitions before it, so that rows read but not folded
    stay within ``READ_AHEAD_PER_WORKER`` partitions a worker, however fast the reads go."""
    ahead = READ_AHEAD_PER_WORKER * max(1, len(client.nthreads()))
    tasks: dict[Future, Partition] = {}
    folds: list[Future] = []
    for k, part in enumerate(partitions):
        # The fold ``ahead`` links back, as a token of no size (not its state).
        after = (
            []
            if k < ahead
            else [client.submit(_nothing, folds[k - ahead], key=f"segcli-after-{token}-{k}")]
        )
        rows = client.submit(
            read, part, job, *after, key=f"segcli-partition-{token}-{part.index}", retries=RETRIES
        )
        tasks[rows] = part
        before = folds[-1] if folds else None
        folds.append(
            client.submit(fold, before, rows, job, key=f"segcli-fold-{token}-{k}", retries=RETRIES)
        )
    return tasks, folds[-1]


def _nothing(*_: Any) -> None:
    return None


def _follow(
    client: Client,
    tasks: dict[Future, Partition],
    per_row: int,
    total: int,
    progress: Progress | None,
) -> None:
    """Report progress as partition tasks finish; stop at the first that failed."""
    done = 0
    # The loop is named because this client is not the process's default one.
    for future in _distributed().as_completed(list(tasks), loop=client.loop):
        part = tasks[future]
        if future.status != "finished":
            _outcome(future, part.describe())
        # The client needs no partition result: once its combine task has it, a worker may
        # free it, so that workers hold O(tree width) partial states, not one per partition.
        del tasks[future]
        future.release()
        done += part.rows * per_row
        if progress is not None:
            progress(done, total)


def _outcome(future: Future, what: str) -> Any:
    """The task's result; a failure becomes one SegcliError line (the task's own if it has one)."""
    try:
        return future.result()
    except SegcliError:
        raise
    except Exception as exc:
        raise _cluster_failure(exc, what) from exc


def _cluster_failure(exc: Exception, what: str) -> ClusterError:
    name = type(exc).__name__
    if name == "KilledWorker":
        return ClusterError(
            f"{what}: Dask workers kept dying while running it (see the worker logs); "
            "nothing was written"
        )
    if name in ("CancelledError", "FutureCancelledError", "CommClosedError") or isinstance(
        exc, OSError
    ):
        # The client's futures are cancelled when its connection to the scheduler is gone.
        return ClusterError(
            f"{what}: lost the Dask scheduler ({first_line(exc)}); nothing was written"
        )
    return ClusterError(f"{what} failed on a Dask worker: {name}: {first_line(exc)}")


def counted_nulls(
    client: Client,
    partitions: tuple[Partition, ...],
    op: ops.Op,
    sorted_ids: bool,
    error: SegcliError,
) -> SegcliError:
    """The error for the nulls of every partition, where ``error`` (a partition's) names those
    of the first partition that failed: a task per partition counts them, on this error path
    only, so that the count and the first row are a single machine's."""
    token = uuid.uuid4().hex[:12]
    futures = [
        client.submit(
            count_partition_nulls,
            part,
            op.skipna_of is not None,
            sorted_ids,
            key=f"segcli-nulls-{token}-{part.index}",
            retries=RETRIES,
        )
        for part in partitions
    ]
    try:
        counts = [
            _outcome(future, part.describe())
            for future, part in zip(futures, partitions, strict=True)
        ]
    finally:
        for future in futures:
            future.release()
    return nulls_error(counts) or error


def planned_nulls(
    partitions_of: Callable[[], tuple[Partition, ...]], sorted_ids: bool, error: NullsError
) -> SegcliError:
    """The error for a null met while planning (a file's first row, read for its dtype and
    inner shape): the nulls of every partition counted, DATA's before IDS', as
    :func:`counted_nulls` counts them, so that a later file's first row is not the error
    where an earlier file, or DATA, holds nulls. Counted here on the client, which read that
    row already: no cluster is started for a run that fails."""
    try:
        with nulls_kept():  # plan again, taking the first rows' nulls as missing values
            partitions = partitions_of()
    except SegcliError:
        return error  # another fault of the inputs; the null met first stays the error
    counts = [count_partition_nulls(part, False, sorted_ids) for part in partitions]
    return nulls_error(counts) or error


def _locator(plan: Plan) -> Locator:
    def locate(position: int) -> tuple[str, str]:
        ref, local = plan.locate(position)
        return ref.label, index_text(ref.shape, local)

    return locate
