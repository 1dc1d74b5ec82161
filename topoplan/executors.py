"""Executors: where the independent tasks of a sweep run (optimizer candidates, scaling points).

One registry, ``EXECUTORS``:

* ``process``: this process when ``workers`` is 1, else a local pool of worker processes (the default);
* ``dask``: a ``distributed.Client`` on a ``LocalCluster`` sized to the machine, or on an existing
  scheduler (``tcp://HOST:8786``) when an address is given. Dask is an optional extra
  (``pip install 'topoplan[dask]'``).

Every executor has the same one method, ``imap(func, context, items, in_flight)``: ``context`` (the
catalog, shipped once per worker) and each item go to ``func(context, arg)``; results come back as they
complete, as ``(tag, ok, value)``, with at most ``in_flight`` tasks submitted and not yet taken. A task
that raises comes back with ``ok`` False and a ``TaskError`` (its traceback text): the sweep reports it
and goes on. ``run_tasks`` adds the content-addressed cache (``topoplan/cache.py``) and progress around
``imap``. The caller merges results by a key of its own, so the outcome never depends on the executor,
the number of workers or the order in which tasks finish. Nothing here prints.
"""

from __future__ import annotations

import socket
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from .errors import Problem, SpecError

# A LocalCluster's workers share this machine's cores with the scheduler and the client, so their upkeep is
# turned down: no statistical profiler sampling every task's stack every 10 ms (it serves the dashboard,
# which a LocalCluster here does not start), the event loops' latency tick and the system monitor less
# often. A cluster at --scheduler keeps its own settings.
LOCAL_CLUSTER_CONFIG = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
                        "distributed.admin.system-monitor.interval": "5s"}
IN_FLIGHT_PER_WORKER = 4     # tasks submitted ahead per worker: enough to keep workers busy, bounded memory
DASK_HINT = "pip install 'topoplan[dask]'"
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TaskError:
    """A task that raised: the exception's type and message and the traceback (from the worker)."""

    kind: str
    message: str
    traceback: str

    @classmethod
    def of(cls, err: BaseException, tb: str | None = None) -> "TaskError":
        text = tb if tb is not None else "".join(traceback.format_exception(type(err), err, err.__traceback__))
        return cls(type(err).__name__, str(err), text)

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" if self.message else self.kind


@dataclass(frozen=True)
class Ready:
    """An item whose answer is already known (a cache hit): executors pass it straight back."""

    value: Any


def _refill(source, pending: dict, limit: int, submit):
    """Submits ``(tag, arg)`` items from ``source`` until ``limit`` are in flight (``pending``: future ->
    tag), yielding ``(tag, True, value)`` for items that are already ``Ready``; returns True once
    ``source`` is exhausted."""
    while len(pending) < limit:
        try:
            tag, arg = next(source)
        except StopIteration:
            return True
        if isinstance(arg, Ready):
            yield tag, True, arg.value
            continue
        pending[submit(arg)] = tag
    return False


def _problem(option: str, message: str, hint: str = "") -> SpecError:
    return SpecError([Problem(option, 0, "", message, hint)])


# ---------------------------------------------------------------------------------------------- process

_CONTEXT = None


def _set_context(context, ignore_interrupts: bool) -> None:
    global _CONTEXT
    if ignore_interrupts:  # Ctrl-C is the parent's to handle: workers print no tracebacks
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)
    _CONTEXT = context


def _call_in_worker(func, arg):
    return func(_CONTEXT, arg)


class ProcessExecutor:
    """Today's executor: in this process for one worker, else a ``ProcessPoolExecutor`` whose workers get
    the context once (their initializer)."""

    name = "process"

    def __init__(self, workers: int = 1):
        self.workers = max(1, int(workers))
        self.pool = None
        self.pending: dict = {}

    def describe(self) -> str:
        return f"{self.workers} worker process(es)" if self.workers > 1 else "this process"

    def __enter__(self):
        return self

    def __exit__(self, kind, *_):
        self.close(cancel=kind is not None)

    def close(self, cancel: bool = False) -> None:
        """Shut the pool down; ``cancel`` (Ctrl-C, an error) also stops the tasks running in the workers:
        a worker busy with a large candidate would otherwise finish it first. The pool has no public way to
        stop its workers before Python 3.14 (``terminate_workers``), so its process table is read."""
        if self.pool is not None:
            for future in self.pending:
                future.cancel()
            workers = list((getattr(self.pool, "_processes", None) or {}).values()) if cancel else []
            self.pool.shutdown(wait=not cancel, cancel_futures=cancel)
            for worker in workers:
                worker.terminate()
            if workers:
                # the pool's own thread reaps its workers too, so a worker's exit is read off its sentinel
                # (``is_alive`` can be fooled by a pid another thread reaped)
                from multiprocessing.connection import wait as wait_ready

                wait_ready([worker.sentinel for worker in workers], timeout=5)
            self.pool = None
        self.pending = {}

    def imap(self, func: Callable, context, items: Iterable, in_flight: int | None = None) -> Iterator:
        if self.workers == 1:
            for tag, arg in items:
                if isinstance(arg, Ready):
                    yield tag, True, arg.value
                    continue
                try:
                    value = func(context, arg)
                except Exception as err:  # noqa: BLE001 - reported with its task, the sweep goes on
                    yield tag, False, TaskError.of(err)
                else:
                    yield tag, True, value
            return
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        from concurrent.futures.process import BrokenProcessPool

        def start_pool():
            self.pool = ProcessPoolExecutor(max_workers=self.workers, initializer=_set_context,
                                            initargs=(context, True))

        def submit(arg):
            future = self.pool.submit(_call_in_worker, func, arg)
            args[future] = arg
            return future

        start_pool()
        args: dict = {}
        suspects: list = []   # (tag, arg) lost with a dead worker: run again one at a time
        alone = None          # the suspect running alone, if one is
        limit = max(1, in_flight or IN_FLIGHT_PER_WORKER * self.workers)
        source = iter(items)
        exhausted = False
        while True:
            if suspects:
                if not self.pending:
                    alone, arg = suspects.pop(0)
                    self.pending[submit(arg)] = alone
            elif not exhausted:
                exhausted = yield from _refill(source, self.pending, limit, submit)
            if not self.pending:
                break
            done, _ = wait(list(self.pending), return_when=FIRST_COMPLETED)
            broken = False
            for future in done:
                err = future.exception()
                if isinstance(err, BrokenProcessPool):
                    broken = True
                    continue
                tag = self.pending.pop(future)
                args.pop(future, None)
                if err is not None:
                    cause = getattr(err, "__cause__", None)   # the worker's traceback, as text
                    yield tag, False, TaskError.of(err, str(cause) if cause is not None else None)
                else:
                    yield tag, True, future.result()
            if broken:
                # a worker died (killed, out of memory): the tasks in flight are lost with the pool. A new
                # pool runs them again one at a time, so that a task that kills its worker alone is the one
                # reported and the others are not blamed for it.
                lost = [(self.pending.pop(f), args.pop(f)) for f in list(self.pending)]
                self.pool.shutdown(wait=False, cancel_futures=True)
                start_pool()
                if len(lost) == 1 and lost[0][0] == alone:
                    yield alone, False, TaskError("WorkerDied", "its worker process died when it ran alone "
                                                  "(killed, or out of memory?)", "")
                else:
                    suspects.extend(lost)
            alone = None if not self.pending else alone
        self.close()


# ------------------------------------------------------------------------------------------------- dask


def _import_distributed():
    try:
        import distributed
    except ImportError as err:
        raise _problem("--executor", f"--executor dask needs Dask's distributed package ({err})",
                       DASK_HINT) from None
    return distributed


def check_scheduler_address(address: str) -> None:
    """Refuse an address Dask cannot parse, and a TCP one where nothing listens, with one clear line (a
    ``Client`` would otherwise wait its whole timeout and leave a traceback behind)."""
    distributed = _import_distributed()
    where = "--scheduler"
    try:
        from distributed.comm.registry import backends

        scheme, location = distributed.comm.parse_address(address)
        if scheme not in backends:
            raise ValueError(f"unknown scheme '{scheme}' (Dask knows {', '.join(sorted(backends))})")
        if scheme not in ("tcp", "tls"):
            return  # inproc, ucx, ws: let Dask judge
        host, port = distributed.comm.parse_host_port(location)
    except (ValueError, TypeError) as err:
        raise _problem(where, f"'{address}' is not a Dask scheduler address: {err}",
                       "give the address `dask scheduler` printed, e.g. tcp://10.0.0.1:8786") from None
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as err:
        raise _problem(where, f"cannot reach the Dask scheduler at {address}: {err.strerror or err}",
                       "start it with `dask scheduler` (and workers with `dask worker ADDRESS`), or drop "
                       "--scheduler and DASK_SCHEDULER_ADDRESS to run on a LocalCluster") from None


def _quiet_on_interrupt(start):
    """``start()`` with SIGINT ignored, so that the worker processes it spawns inherit that: Ctrl-C is the
    parent's to handle (it cancels the futures and closes the cluster), and workers print no tracebacks."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return start()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return start()
    finally:
        signal.signal(signal.SIGINT, previous)


class DaskExecutor:
    """A ``distributed.Client``: on the scheduler at ``address``, else on a ``LocalCluster`` of
    ``workers`` single-threaded workers (processes, or threads of this process with ``processes=False``).
    The context is scattered to every worker once; a lost worker's tasks are rerun by the scheduler."""

    name = "dask"

    def __init__(self, workers: int = 1, address: str | None = None, processes: bool = True):
        self.workers = max(1, int(workers))
        self.address = address
        self.processes = processes
        self.client = self.cluster = None
        self.pending: dict = {}

    def describe(self) -> str:
        if self.address:
            return f"the Dask scheduler at {self.address}"
        kind = "processes" if self.processes else "threads"
        return f"a Dask LocalCluster of {self.workers} worker {kind}"

    def __enter__(self):
        import logging

        distributed = _import_distributed()
        if self.address:
            check_scheduler_address(self.address)
            try:
                self.client = distributed.Client(self.address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
            except (OSError, ValueError) as err:
                raise _problem("--scheduler", f"cannot connect to the Dask scheduler at {self.address}: {err}",
                               "check the address and that the scheduler runs") from None
            self.check_same_code()
        else:
            import dask

            # Dask's nanny sets MALLOC_TRIM_THRESHOLD_ in its workers, which turns off glibc's adaptive mmap
            # threshold: every numpy array above 128 KiB is then mapped and unmapped, and an evaluation runs
            # 1.6-2.6x slower (docs/performance.md). Unset (None) for our workers; the rest of Dask's
            # pre-spawn environment (one BLAS thread per worker) stays.
            with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                                  **LOCAL_CLUSTER_CONFIG}):
                self.cluster = _quiet_on_interrupt(lambda: distributed.LocalCluster(
                    n_workers=self.workers, threads_per_worker=1, processes=self.processes,
                    dashboard_address=None, silence_logs=logging.ERROR))
            self.client = distributed.Client(self.cluster, set_as_default=False)
        return self

    def check_same_code(self) -> None:
        """The scheduler and every worker run the topoplan this client runs (same source fingerprint): a
        task graph the scheduler cannot read, or results of other code stored under this code's cache
        keys, would follow otherwise."""
        from .cache import code_fingerprint

        ours = code_fingerprint()
        try:
            theirs = {"scheduler": self.client.run_on_scheduler(code_fingerprint),
                      **self.client.run(code_fingerprint)}
        except Exception as err:  # noqa: BLE001 - an import error over there, reported as such
            theirs = {"the cluster": f"cannot run topoplan ({type(err).__name__}: {err})"}
        other = sorted(where for where, fp in theirs.items() if fp != ours)
        if other:
            self.close()
            detail = theirs[other[0]] if other == ["the cluster"] else \
                f"{len(other)} of its scheduler and {len(theirs) - 1} worker(s) differ: {', '.join(other[:3])}"
            raise _problem("--scheduler", f"the Dask cluster at {self.address} runs a different topoplan than "
                           f"this one ({detail})",
                           "install this same topoplan (and version of its code) where the scheduler and "
                           "workers run, then restart them")

    def __exit__(self, kind, *_):
        self.close(cancel=kind is not None)

    def close(self, cancel: bool = False) -> None:
        if self.client is not None:
            if self.pending:
                try:
                    self.client.cancel(list(self.pending), force=True)
                except Exception:  # noqa: BLE001 - closing anyway
                    pass
            self.pending = {}
            self.client.close()
            self.client = None
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    def worker_count(self) -> int:
        return len(self.client.scheduler_info().get("workers", {})) if self.client is not None else 0

    def imap(self, func: Callable, context, items: Iterable, in_flight: int | None = None) -> Iterator:
        """Items go out in batches (one Dask task runs several), sized from the measured time per item so a
        task takes about ``BATCH_TARGET_S``: Dask's cost per task (scheduling, a round trip, the result's
        transfer) would otherwise be a fifth of a 70 ms candidate. A batch that fails as a whole (its worker
        died more often than Dask retries) runs again item by item, so only the item that kills its worker
        is reported. ``in_flight`` (tests) bounds the tasks in flight and keeps batches of one."""
        import time

        from distributed import as_completed

        client = self.client
        shared = client.scatter(context, broadcast=True, hash=False)
        source = iter(items)
        finished = as_completed(loop=client.loop)
        alone: list = []      # (tag, arg) of a failed batch, to run one at a time
        batch = [1]
        args_of: dict = {}    # future -> [(tag, arg), ...]

        def submit(group):
            future = client.submit(_run_batch, func, shared, [arg for _, arg in group], pure=False)
            finished.add(future)
            self.pending[future] = [tag for tag, _ in group]
            args_of[future] = group

        def refill(limit):
            """Submit batches until ``limit`` tasks are in flight; yield the Ready items met on the way."""
            while len(self.pending) < limit:
                if alone:
                    submit([alone.pop(0)])
                    continue
                group = []
                while len(group) < batch[0]:
                    try:
                        tag, arg = next(source)
                    except StopIteration:
                        break
                    if isinstance(arg, Ready):
                        yield tag, True, arg.value
                    else:
                        group.append((tag, arg))
                if not group:
                    return True
                submit(group)
            return False

        exhausted = False
        counted_at, limit = -1e9, 1
        while True:
            if in_flight:
                limit = in_flight
            elif not self.address:
                limit = IN_FLIGHT_PER_WORKER * self.workers
            elif time.monotonic() - counted_at > 2.0:   # a remote cluster grows and shrinks (Slurm jobs)
                counted_at = time.monotonic()
                limit = IN_FLIGHT_PER_WORKER * max(1, self.worker_count())
            if not exhausted or alone:
                exhausted = (yield from refill(limit)) or exhausted
            if not self.pending:
                break
            future = next(finished)
            tags, group = self.pending.pop(future), args_of.pop(future)
            if future.status == "error":
                if len(group) > 1:
                    alone.extend(group)
                else:
                    err = future.exception()
                    tb = future.traceback()
                    text = "".join(traceback.format_exception(type(err), err, tb)) if tb is not None else None
                    yield tags[0], False, TaskError.of(err, text)
            else:
                elapsed_s, outcomes = future.result()
                if not in_flight and outcomes:
                    batch[0] = max(1, min(MAX_BATCH, int(BATCH_TARGET_S * len(outcomes) / max(elapsed_s, 1e-6))))
                for tag, (ok, value) in zip(tags, outcomes):
                    yield tag, ok, value
            future.release()


# Seconds of work per Dask task, and at most this many items: a batch is sized from the last one's time per
# item, which lags when items grow costlier along a space (the 360-candidate space goes from 3 ms to 0.8 s
# per candidate), and the last batches decide the tail. Measured on that space, LocalCluster(2): 32 items
# and 0.5 s made batches of up to 7.8 s and ended in 19.1-19.8 s; 8 and 0.25 s, batches of <= 2.6 s, 17.9-18.2 s.
BATCH_TARGET_S = 0.25
MAX_BATCH = 8


def _run_batch(func: Callable, context, args: list) -> tuple[float, list]:
    """Runs ``func(context, arg)`` for every arg on a Dask worker: (seconds taken, [(ok, value or
    TaskError)]); an item that raises is reported alone and the others still run."""
    import time

    start = time.perf_counter()
    out = []
    for arg in args:
        try:
            out.append((True, func(context, arg)))
        except Exception as err:  # noqa: BLE001 - reported with its task, the batch goes on
            out.append((False, TaskError.of(err)))
    return time.perf_counter() - start, out


EXECUTORS = {"process": ProcessExecutor, "dask": DaskExecutor}


def make_executor(name: str, workers: int = 1, scheduler: str | None = None):
    """The executor ``name`` (``process`` or ``dask``); a scheduler address only means something to Dask."""
    if name not in EXECUTORS:
        from .errors import did_you_mean

        raise _problem("--executor", f"unknown executor '{name}'", did_you_mean(name, EXECUTORS))
    if scheduler and name != "dask":
        raise _problem("--scheduler", f"a scheduler address needs --executor dask, not {name}",
                       "add --executor dask, or drop --scheduler (and DASK_SCHEDULER_ADDRESS)")
    if name == "dask":
        _import_distributed()
        return DaskExecutor(workers, scheduler or None)
    return ProcessExecutor(workers)


# ------------------------------------------------------------------------------------------------ tasks


@dataclass(frozen=True)
class Task:
    """One unit of a sweep: ``index`` orders the merge, ``key`` is its content hash (the cache key),
    ``label`` names it in messages (the candidate)."""

    index: int
    key: str
    label: str
    arg: Any


@dataclass
class RunStats:
    tasks: int = 0
    evaluated: int = 0
    cached: int = 0
    failed: int = 0


def run_tasks(executor, func: Callable, context, tasks: Iterable[Task], cache=None,
              encode: Callable = lambda v: v, decode: Callable = lambda d: d, progress=None,
              stats: RunStats | None = None, in_flight: int | None = None) -> Iterator:
    """``(task, ok, value)`` for every task, in completion order. With a ``cache``, a task whose key is
    stored is answered from it (never submitted) and every computed value is stored. Every value, fresh or
    cached, goes through ``decode(json(encode(value)))``, so the two are indistinguishable.
    ``progress(task, ok)`` is called after each one."""
    import json

    stats = stats if stats is not None else RunStats()
    waiting: dict = {}

    def items():
        for task in tasks:
            stats.tasks += 1
            hit = cache.get(task.key) if cache is not None else None
            waiting[task.index] = task
            if hit is not None:
                stats.cached += 1
                yield ("hit", task.index), Ready(hit)
            else:
                yield ("run", task.index), task.arg

    for (kind, index), ok, value in executor.imap(func, context, items(), in_flight):
        task = waiting.pop(index)
        if kind == "hit":
            value = decode(json.loads(value))
        elif ok:
            stats.evaluated += 1
            text = json.dumps(encode(value), separators=(",", ":"))  # key order kept: it is the output order
            if cache is not None:
                cache.put(task.key, text)
            value = decode(json.loads(text))
        else:
            stats.failed += 1
        yield task, ok, value
        if progress is not None:
            progress(task, ok)
    if cache is not None and stats.evaluated:
        cache.prune()
