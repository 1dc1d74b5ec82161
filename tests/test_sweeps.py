"""Sweeps on executors (issue 18): byte-identical results on process 1/2 workers and Dask, the
content-addressed cache (evaluations counted), streaming with bounded in-flight tasks, failures and Ctrl-C."""

from __future__ import annotations

import builtins
import json
import multiprocessing
import os
import threading

import pytest
from click.testing import CliRunner

from topoplan.cache import Cache, CacheError, content_key
from topoplan.cli import main
from topoplan.executors import ProcessExecutor, Task, run_tasks
from topoplan.optimize.search import candidate_tasks, entries_used, search
from topoplan.optimize.space import candidate_specs, load_space
from topoplan.report.writers import render_optimize

SPACE = """\
name: sweep-test
gpus: [1024]
servers: [dgx-h100]
topologies: [fat-tree, rail-optimized]
switches: [nvidia-qm9700, broadcom-th5-64x800g]
oversubscription: [1, 3]
scalable_unit: 32
workload:
  parallelism: {tp: 8, pp: 4, ep: 8}
  collectives:
    - {name: grad-sync, op: allreduce, group: dp, size: 1GiB, algorithm: ring}
    - {name: moe-dispatch, op: alltoall, group: ep, size: 256MiB}
constraints:
  max_cost_per_gpu_usd: 5600
"""
CANDIDATES = 8


@pytest.fixture
def space_file(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(SPACE)
    return path


def _optimize(*args, env=None):
    return CliRunner().invoke(main, ["optimize", *map(str, args)], env=env, catch_exceptions=False)


def _counts(stderr: str) -> tuple[int, int]:
    """(evaluated, from the cache) from the summary line on stderr."""
    line = next(x for x in stderr.splitlines() if " evaluated, " in x)
    evaluated = int(line.split(": ")[2].split()[0].replace(",", ""))
    cached = int(line.split(" evaluated, ")[1].split()[0].replace(",", ""))
    return evaluated, cached


def test_json_is_byte_identical_on_every_executor(space_file, catalog, tmp_path):
    distributed = pytest.importorskip("distributed")
    from topoplan.executors import DaskExecutor

    one = _optimize(space_file, "--format", "json", "--no-cache", "--workers", 1)
    two = _optimize(space_file, "--format", "json", "--no-cache", "--workers", 2)
    assert one.exit_code == two.exit_code == 0, one.output + two.output
    data = json.loads(one.stdout)
    assert len(data["candidates"]) + data["infeasible"]["count"] == CANDIDATES
    assert data["candidates"] and data["infeasible"]["count"]  # both kinds, so both paths are compared
    assert one.stdout == two.stdout
    # Dask: a LocalCluster of two worker processes from the CLI, and one of threads in this process
    dask = _optimize(space_file, "--format", "json", "--no-cache", "--executor", "dask", "--workers", 2)
    assert dask.exit_code == 0, dask.output
    assert "Dask LocalCluster of 2 worker processes" in dask.stderr
    assert dask.stdout == one.stdout
    space = load_space(str(space_file), catalog)
    threads = search(space, executor=DaskExecutor(2, processes=False), catalog=catalog, keep_infeasible=False)
    assert render_optimize(threads.to_json(), "json") == one.stdout
    assert distributed.__version__
    # and from the cache: the second run reads every candidate back, same bytes
    cache = tmp_path / "cache"
    first = _optimize(space_file, "--format", "json", "--cache", cache, "--workers", 2)
    second = _optimize(space_file, "--format", "json", "--cache", cache)
    assert first.stdout == second.stdout == one.stdout
    assert _counts(first.stderr) == (CANDIDATES, 0) and _counts(second.stderr) == (0, CANDIDATES)


def test_scale_is_identical_on_dask_threads(catalog):
    pytest.importorskip("distributed")
    from topoplan.executors import DaskExecutor
    from topoplan.scaling import scale_designs, study_dict

    sizes = [3072, 6144, 12288, 24576]
    here = scale_designs(["designs/gpt3-175b-12288.yaml"], catalog, sizes)
    there = scale_designs(["designs/gpt3-175b-12288.yaml"], catalog, sizes, executor=DaskExecutor(2, processes=False))
    assert json.dumps([study_dict(s) for s in here]) == json.dumps([study_dict(s) for s in there])
    assert [p.infeasible == "" for p in here[0].points] == [True, True, True, False]


def test_cache_second_run_evaluates_nothing_and_a_price_change_only_its_candidates(space_file, tmp_path, catalog):
    cache = tmp_path / "cache"
    first = _optimize(space_file, "--format", "json", "--cache", cache)
    second = _optimize(space_file, "--format", "json", "--cache", cache)
    assert _counts(first.stderr) == (CANDIDATES, 0)
    assert _counts(second.stderr) == (0, CANDIDATES)
    assert first.stdout == second.stdout
    prices = tmp_path / "prices.yaml"
    prices.write_text("switches:\n  - id: broadcom-th5-64x800g\n    price_usd: 30000\n")
    changed = _optimize(space_file, "--format", "json", "--cache", cache, "--catalog", prices)
    assert changed.exit_code == 0, changed.output
    uses = [name for name, _spec, _sizing in candidate_specs(load_space(str(space_file), catalog))
            if "broadcom-th5-64x800g" in name]
    assert len(uses) == CANDIDATES // 2
    assert _counts(changed.stderr) == (len(uses), CANDIDATES - len(uses))
    before = {c["name"]: c["cost_usd"] for c in json.loads(first.stdout)["candidates"]}
    after = {c["name"]: c["cost_usd"] for c in json.loads(changed.stdout)["candidates"]}
    assert any(after[n] < before[n] for n in after if n in before and n in uses)  # the new price is used
    assert all(after[n] == before[n] for n in after if n in before and n not in uses)
    again = _optimize(space_file, "--format", "json", "--cache", cache, "--catalog", prices)
    assert _counts(again.stderr) == (0, CANDIDATES) and again.stdout == changed.stdout


def test_candidate_keys_depend_on_the_entries_used(catalog):
    space = load_space("designs/spaces/small.yaml", catalog)
    tasks = list(candidate_tasks(space, catalog))
    assert len({t.key for t in tasks}) == len(tasks)
    assert [t.key for t in tasks] == [t.key for t in candidate_tasks(space, catalog)]  # stable
    refs = entries_used(tasks[0].arg[1], tasks[0].arg[2], catalog)
    assert ("servers", "dgx-h100") in refs and ("nics", catalog.servers["dgx-h100"].nic) in refs
    assert ("switches", "nvidia-qm9700") in refs and ("switches", "broadcom-th5-64x800g") not in refs
    sized = next(t for t in tasks if "-sized-" in t.label)   # sizing may pick any of the space's switches
    assert {("switches", s) for s in space.axes["switches"]} <= set(entries_used(sized.arg[1], sized.arg[2], catalog))
    assert content_key("k", {"a": 1, "b": [1, 2]}, {}) == content_key("k", {"b": [1, 2], "a": 1}, {})
    assert content_key("k", {"a": 1}, {}) != content_key("k", {"a": 1.5}, {})


def test_corrupt_entries_are_recomputed_never_trusted(space_file, tmp_path):
    cache_dir = tmp_path / "cache"
    first = _optimize(space_file, "--format", "json", "--cache", cache_dir)
    entries = sorted(cache_dir.glob("??/*.json"))
    assert len(entries) == CANDIDATES
    raw = entries[0].read_bytes()
    entries[0].write_bytes(raw.replace(b'"cost_usd":', b'"cost_usd":1', 1) if b'"cost_usd":' in raw
                           else raw[:-3] + b"xyz")                  # same length, wrong checksum
    entries[1].write_bytes(raw[: len(raw) // 2])                    # truncated
    entries[2].write_bytes(b"\x00\xff not json\n{}")                # garbage
    again = _optimize(space_file, "--format", "json", "--cache", cache_dir)
    assert again.exit_code == 0
    assert _counts(again.stderr) == (3, CANDIDATES - 3)
    assert "3 cache entr(ies) failed their checksum" in again.stderr
    assert again.stdout == first.stdout
    assert not list(cache_dir.glob("??/.tmp-*"))                     # nothing half-written left


def test_cache_writes_are_atomic_under_concurrent_writers(tmp_path):
    cache = Cache(tmp_path / "c")
    key = "ab" + "0" * 62
    payloads = [json.dumps({"writer": i, "pad": "x" * (1000 * (i + 1))}) for i in range(4)]
    errors = []

    def write(text):
        other = Cache(tmp_path / "c")
        for _ in range(50):
            other.put(key, text)
            got = other.get(key)
            if got not in payloads:
                errors.append(got)

    threads = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cache.get(key) in payloads
    assert not list((tmp_path / "c").glob("??/.tmp-*"))


def test_cache_is_bounded_least_recently_used_first(tmp_path):
    cache = Cache(tmp_path / "c", max_bytes=10_000)
    keys = [f"{i:02x}" + "f" * 62 for i in range(20)]
    for i, key in enumerate(keys):
        cache.put(key, json.dumps({"i": i, "pad": "x" * 900}))
        os.utime(cache.path(key), (1_000_000 + i, 1_000_000 + i))  # written in this order
    os.utime(cache.path(keys[0]), (2_000_000, 2_000_000))           # the oldest was just used
    assert cache.size_bytes() > 10_000
    removed = cache.prune()
    assert removed > 0 and cache.size_bytes() <= 10_000
    assert cache.get(keys[0]) is not None and cache.get(keys[-1]) is not None
    assert cache.get(keys[1]) is None


def test_cache_directory_that_is_a_file(space_file, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    named = _optimize(space_file, "--cache", blocker)
    assert named.exit_code == 2
    assert "--cache: cannot use the cache:" in named.stderr and "is a file" in named.stderr
    assert "Traceback" not in named.output
    # the default location unusable: a warning, and the sweep runs without a cache
    default = _optimize(space_file, "--format", "json", env={"TOPOPLAN_CACHE_DIR": str(blocker / "sub")})
    assert default.exit_code == 0, default.output
    assert "warning: cannot use the cache" in default.stderr
    assert _counts(default.stderr) == (CANDIDATES, 0)
    with pytest.raises(CacheError):
        Cache(blocker)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_cache_directory_unwritable(space_file, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        result = _optimize(space_file, "--cache", locked / "cache")
        assert result.exit_code == 2 and "cannot use the cache" in result.stderr
    finally:
        locked.chmod(0o700)


def test_dask_missing_is_exit_2_with_the_install_hint(space_file, monkeypatch):
    real_import = builtins.__import__

    def no_dask(name, *args, **kwargs):
        if name == "distributed" or name.startswith("distributed.") or name == "dask":
            raise ImportError(f"No module named '{name}'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dask)
    result = _optimize(space_file, "--executor", "dask")
    assert result.exit_code == 2
    assert "pip install 'topoplan[dask]'" in result.stderr and "Traceback" not in result.output
    assert result.stderr.startswith("--executor: ")


@pytest.mark.parametrize("address, message", [
    ("not-an-address", "is not a Dask scheduler address"),
    ("http://127.0.0.1:8786", "is not a Dask scheduler address"),
    ("tcp://127.0.0.1:1", "cannot reach the Dask scheduler at tcp://127.0.0.1:1"),
])
def test_bad_scheduler_address_is_exit_2(space_file, address, message):
    pytest.importorskip("distributed")
    result = _optimize(space_file, "--scheduler", address)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "(hint: " in result.stderr
    assert "Traceback" not in result.output


def test_scheduler_from_the_environment_and_with_the_process_executor(space_file):
    pytest.importorskip("distributed")
    env = _optimize(space_file, "--executor", "dask", env={"DASK_SCHEDULER_ADDRESS": "tcp://127.0.0.1:1"})
    assert env.exit_code == 2 and "cannot reach the Dask scheduler at tcp://127.0.0.1:1" in env.stderr
    # the variable alone does not switch executors
    plain = _optimize(space_file, "--no-cache", env={"DASK_SCHEDULER_ADDRESS": "tcp://127.0.0.1:1"})
    assert plain.exit_code == 0, plain.output
    mixed = _optimize(space_file, "--executor", "process", "--scheduler", "tcp://127.0.0.1:8786")
    assert mixed.exit_code == 2 and "needs --executor dask" in mixed.stderr


def test_a_task_that_raises_is_reported_with_its_candidate_and_the_rest_continue(space_file, tmp_path,
                                                                                 monkeypatch):
    from topoplan.optimize import search as search_module

    real = search_module.evaluate_candidate
    broken = "rail-optimized-dgx-h100-nvidia-qm9700-1024-o1-p1"

    def sometimes(catalog, item):
        if item[0] == broken:
            raise ZeroDivisionError("a bug in one candidate")
        return real(catalog, item)

    monkeypatch.setattr(search_module, "evaluate_candidate", sometimes)
    out = tmp_path / "out.json"
    result = _optimize(space_file, "--format", "json", "-o", out, "--cache", tmp_path / "cache")
    assert result.exit_code == 70
    assert f"internal error in {broken}: ZeroDivisionError: a bug in one candidate" in result.stderr
    assert "Traceback" in result.stderr and "1 task(s) failed" in result.stderr
    data = json.loads(out.read_text())
    assert data["failed"] == [{"name": broken, "error": "ZeroDivisionError: a bug in one candidate"}]
    assert len(data["candidates"]) + data["infeasible"]["count"] == CANDIDATES - 1
    assert _counts(result.stderr) == (CANDIDATES - 1, 0)
    monkeypatch.setattr(search_module, "evaluate_candidate", real)   # fixed: only the failed one runs
    fixed = _optimize(space_file, "--format", "json", "--cache", tmp_path / "cache")
    assert fixed.exit_code == 0 and _counts(fixed.stderr) == (1, CANDIDATES - 1)


def test_ctrl_c_cancels_the_pool_and_exits_130(space_file, tmp_path, monkeypatch):
    from topoplan import cli

    calls = [0]

    def interrupt(self, label=""):
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli.Progress, "step", interrupt)
    out = tmp_path / "out.json"
    before = set(multiprocessing.active_children())   # other tests' processes may still be winding down
    result = _optimize(space_file, "--format", "json", "-o", out, "--workers", 2, "--no-cache")
    assert result.exit_code == 130
    assert "interrupted; nothing was written" in result.stderr
    assert not out.exists()
    ours = [c for c in multiprocessing.active_children() if c not in before]
    # the pool's workers are gone: each one's sentinel is ready once it has exited (``is_alive`` is not to be
    # trusted here: the pool's own thread may reap a worker first, and the pid then looks alive forever)
    from multiprocessing.connection import wait as wait_ready

    assert not [c for c in ours if not wait_ready([c.sentinel], timeout=10)]


def _square(_context, x):
    return x * x


def _square_but_seven(_context, x):
    if x == 7:
        raise ValueError("seven")
    return x * x


def test_dask_batches_report_each_item_and_the_one_that_raises():
    """Dask runs items in batches (several per task): every item still comes back under its own tag, a
    raising item alone is reported, and cache hits (Ready) pass straight through."""
    pytest.importorskip("distributed")
    from topoplan.executors import DaskExecutor, Ready

    items = [(i, Ready(-1) if i % 10 == 0 else i) for i in range(200)]
    with DaskExecutor(2, processes=False) as executor:
        results = {tag: (ok, value) for tag, ok, value in executor.imap(_square_but_seven, None, items)}
    assert sorted(results) == list(range(200))
    assert results[7][0] is False and "seven" in str(results[7][1])
    assert all(results[i] == (True, -1) for i in range(0, 200, 10))
    assert all(results[i] == (True, i * i) for i in range(200) if i % 10 and i != 7)


def test_in_flight_tasks_are_bounded_and_the_source_read_lazily():
    pulled = []

    def source():
        for i in range(40):
            pulled.append(i)
            yield Task(i, f"{i:064x}", str(i), i)

    with ProcessExecutor(2) as executor:
        results = run_tasks(executor, _square, None, source(), in_flight=4)
        first = next(results)
        assert len(pulled) <= 4 + 1           # four submitted (at most one more read ahead)
        rest = list(results)
    values = sorted([first[2]] + [v for _, _, v in rest])
    assert values == [i * i for i in range(40)]


def test_streaming_keeps_no_infeasible_candidate(space_file, catalog):
    space = load_space(str(space_file), catalog)
    kept = search(space, catalog=catalog, keep_infeasible=True)
    streamed = search(space, catalog=catalog, keep_infeasible=False)
    assert any(o.figures is None for o in kept.outcomes)
    assert all(o.figures is not None for o in streamed.outcomes)
    assert streamed.to_json() == kept.to_json()
    assert streamed.stats.tasks == CANDIDATES and streamed.stats.evaluated == CANDIDATES


def _dies_once(marker_dir, x):
    """Kills its worker the first time it sees 3 (a marker file remembers), else squares."""
    import os

    marker = os.path.join(marker_dir, "died")
    if x == 3 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(9)
    return x * x


def _always_dies_on_5(_context, x):
    import os

    if x == 5:
        os._exit(9)
    return x * x


def test_a_lost_worker_is_replaced_and_its_tasks_run_again(tmp_path):
    tasks = [Task(i, f"{i:064x}", str(i), i) for i in range(12)]
    with ProcessExecutor(2) as executor:
        results = list(run_tasks(executor, _dies_once, str(tmp_path), iter(tasks)))
    assert (tmp_path / "died").exists()
    assert sorted(v for _, ok, v in results if ok) == [i * i for i in range(12)]
    assert all(ok for _, ok, _ in results)


def test_a_task_that_kills_every_worker_is_reported_and_the_rest_finish():
    tasks = [Task(i, f"{i:064x}", str(i), i) for i in range(12)]
    with ProcessExecutor(2) as executor:
        results = list(run_tasks(executor, _always_dies_on_5, None, iter(tasks)))
    failed = [(task.index, value) for task, ok, value in results if not ok]
    assert [index for index, _ in failed] == [5]
    assert failed[0][1].kind == "WorkerDied"
    assert sorted(v for _, ok, v in results if ok) == [i * i for i in range(12) if i != 5]
