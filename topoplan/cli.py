"""The ``topoplan`` command line: one thin command per verb, wiring pipeline stages to writers.

Exit codes (contract): 0 success; 1 a spec target missed (``check``); 2 bad input or an infeasible
design, one ``FILE:LINE: key.path: message (hint: ...)`` line per problem; 70 internal error.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
import time
import traceback

import click

from . import __version__
from .catalog import SECTIONS, load_catalog
from .errors import EngineRefused, TopoplanError, did_you_mean
from .interop import EXPORTERS, ExportOptions, export
from .report import build_report
from .report.writers import FORMATS, render

EXIT_TARGET_MISSED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130   # Ctrl-C, as shells report SIGINT
# GraphML/GEXF go through networkx, about 4.6 kB per arc (the 131k design: 9.7 GB); refuse past this
MAX_GRAPH_EXPORT_ARCS = 250_000


def catalog_option(func):
    return click.option("--catalog", "catalog_files", multiple=True, type=click.Path(dir_okay=False),
                        metavar="FILE", help="Extra catalog YAML adding or overriding entries (repeatable).")(func)


def format_option(func):
    return click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
                        help="Output format: table for terminals, markdown for pull requests, json for tools.")(func)


PAGE_FORMATS = FORMATS + ("html",)   # report, optimize and compare also write one self-contained HTML page


def page_format_option(func):
    return click.option("--format", "fmt", type=click.Choice(PAGE_FORMATS), default="table", show_default=True,
                        help="Output format: table for terminals, markdown for pull requests, json for tools, "
                             "html for one self-contained page (needs -o FILE).")(func)


def check_html_output(fmt: str, output: str | None) -> None:
    """HTML goes to a file: refuse it on standard output (exit 2, with the fix)."""
    if fmt == "html" and output is None:
        from .errors import Problem, SpecError

        raise SpecError([Problem("--format", 0, "", "an HTML page is written to a file, not to the terminal",
                                 "add -o FILE.html, then open the file in a browser")])


def output_option(func):
    return click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                        help="Write to FILE instead of standard output (written whole or not at all).")(func)


def executor_options(func):
    """--executor, --scheduler and --workers, shared by the sweeps (optimize, scale, resilience)."""
    func = click.option("--workers", type=click.IntRange(min=1), default=None,
                        help="Workers sharing the work, at most one per CPU [default: 1 for process; the "
                             "machine's CPUs for a Dask LocalCluster; the cluster's own with --scheduler].")(func)
    func = click.option("--scheduler", metavar="ADDRESS", default=None,
                        help="An existing Dask scheduler (tcp://HOST:8786, as `dask scheduler` prints); implies "
                             "--executor dask. With --executor dask and no --scheduler, DASK_SCHEDULER_ADDRESS "
                             "is used when set, else a LocalCluster.")(func)
    func = click.option("--executor", "executor_name", type=click.Choice(("process", "dask")), default=None,
                        help="Where the tasks (candidates, sizes, failure runs) run: process (this process, or a pool with --workers; the "
                             "default) or dask (pip install 'topoplan[dask]').")(func)
    return func


def cache_options(func):
    """--cache DIR, --no-cache and --cache-size, shared by the sweeps."""
    func = click.option("--cache-size", "cache_size", default="2GiB", show_default=True, metavar="SIZE",
                        help="Bound of the cache on disk; the least recently used entries go first.")(func)
    func = click.option("--no-cache", "no_cache", is_flag=True, default=False,
                        help="Evaluate everything; read and write no cache.")(func)
    func = click.option("--cache", "cache_dir", type=click.Path(), default=None, metavar="DIR",
                        help="Cache of evaluations, by content [default: $TOPOPLAN_CACHE_DIR, else "
                             "$XDG_CACHE_HOME/topoplan, else ~/.cache/topoplan].")(func)
    return func


def make_sweep_executor(command: str, name: str | None, scheduler: str | None, workers: int | None,
                        tasks: int | None, unit: str):
    """The executor the options ask for (exit 2 with a hint when Dask is missing or the address is bad)."""
    from .executors import make_executor

    if name is None:
        name = "dask" if scheduler else "process"
    if name == "dask" and not scheduler:
        scheduler = os.environ.get("DASK_SCHEDULER_ADDRESS") or None
    if name == "dask" and scheduler:
        if workers is not None:
            click.echo(f"topoplan {command}: --workers {workers} ignored: the cluster at {scheduler} has its own "
                       "workers", err=True)
        return make_executor(name, 1, scheduler)
    if workers is None:
        workers = (os.cpu_count() or 1) if name == "dask" else 1
        workers = min(workers, max(1, tasks)) if tasks is not None else workers
    return make_executor(name, usable_workers(command, workers, tasks, unit), scheduler)


def open_cache(command: str, cache_dir: str | None, no_cache: bool, cache_size: str):
    """The cache the options ask for, or None. A directory the user named that cannot be used is exit 2;
    the default one falls back to no cache, with a warning."""
    from .cache import Cache, CacheError, default_cache_dir
    from .errors import Problem, SpecError
    from .units import parse_size

    try:
        max_bytes = parse_size(cache_size)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--cache-size") from None
    if no_cache:
        return None
    try:
        return Cache(cache_dir if cache_dir else default_cache_dir(), max_bytes)
    except CacheError as err:
        if cache_dir:
            raise SpecError([Problem("--cache", 0, "", f"cannot use the cache: {err}",
                                     "name a writable directory, or pass --no-cache")]) from None
        click.echo(f"topoplan {command}: warning: cannot use the cache ({err}); evaluating everything "
                   "(choose one with --cache DIR, or pass --no-cache)", err=True)
        return None


def report_sweep(command: str, stats, cache, unit: str) -> None:
    """One line on stderr: evaluated, from the cache, failed; a warning when the cache could not be written."""
    where = f" ({cache.directory})" if cache is not None else ""
    failed = f", {stats.failed:,} failed" if stats.failed else ""
    click.echo(f"topoplan {command}: {stats.tasks:,} {unit}: {stats.evaluated:,} evaluated, {stats.cached:,} from "
               f"the cache{where}{failed}", err=True)
    if cache is not None and cache.corrupt:
        click.echo(f"topoplan {command}: {cache.corrupt:,} cache entr(ies) failed their checksum and were "
                   "recomputed", err=True)
    if cache is not None and cache.write_error:
        click.echo(f"topoplan {command}: warning: {cache.write_error}; results were not cached", err=True)


def report_failures(command: str, failures) -> None:
    """Tasks that raised (bugs): each with its candidate and the worker's traceback; then exit 70."""
    if not failures:
        return
    shown = set()
    for label, err in failures:
        click.echo(f"topoplan {command}: internal error in {label}: {err}", err=True)
        if (err.kind, err.message) not in shown:   # the same error again: its traceback once
            shown.add((err.kind, err.message))
            click.echo(err.traceback.rstrip(), err=True)
    click.echo(f"topoplan {command}: {len(failures)} task(s) failed (a bug; please report it with the input); "
               "the rest ran and were written", err=True)
    sys.exit(EXIT_INTERNAL)


def usable_workers(command: str, requested: int, tasks: int | None = None, unit: str = "task") -> int:
    """``requested`` workers, capped (with a line on stderr) by the CPUs and, if known, the ``unit``s of
    work."""
    cpus = os.cpu_count() or 1
    limit = max(1, cpus if tasks is None else min(tasks, cpus))
    if requested > limit:
        why = f"{cpus} CPU(s)" if tasks is None else f"{tasks:,} {unit}(s) on {cpus} CPU(s)"
        click.echo(f"topoplan {command}: {limit} worker(s), not {requested}: {why}", err=True)
    return min(requested, limit)


def handle_errors(func):
    """Turn user-fixable errors into exit 2 with one line per problem; anything else is a bug (exit 70)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except TopoplanError as err:
            for problem in err.problems:
                click.echo(str(problem), err=True)
            sys.exit(EXIT_BAD_INPUT)
        except KeyboardInterrupt:
            click.echo("topoplan: interrupted; nothing was written", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception:  # noqa: BLE001 - last-resort reporting of bugs
            click.echo("topoplan: internal error (a bug; please report it with the input that caused it)", err=True)
            click.echo(traceback.format_exc(), err=True)
            sys.exit(EXIT_INTERNAL)

    return wrapper


def write_output(text: str, output: str | None) -> None:
    """Print, or write a file atomically (temporary file in the same directory, then rename)."""
    if output is None:
        click.echo(text, nl=False)
        return
    write_file_atomic(output, text.encode("utf-8"))


def _cannot_write(path: str, reason: str, hint: str = ""):
    from .errors import Problem, SpecError

    return SpecError([Problem(path, 0, "", f"cannot write: {reason}", hint)])


def check_outputs(outputs, inputs=()) -> None:
    """Before any work: every output path can be written, and none is an input or a directory."""
    import stat

    for path in (p for p in outputs if p):
        if os.path.isdir(path):
            raise _cannot_write(path, "it is a directory", "name a file")
        if len(os.path.basename(path)) > 255:
            raise _cannot_write(path, "the file name is longer than 255 characters")
        for source in (i for i in inputs if i and os.path.exists(i)):
            if os.path.exists(path) and os.path.samefile(path, source):
                raise _cannot_write(path, f"it is an input of this command ({source})", "write elsewhere")
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise _cannot_write(path, f"the directory {directory} does not exist", "create it first or write elsewhere")
        regular = not os.path.exists(path) or stat.S_ISREG(os.stat(path).st_mode)
        if regular and not os.access(directory, os.W_OK):
            raise _cannot_write(path, f"the directory {directory} is not writable")


def write_file_atomic(path: str, data: bytes) -> None:
    """Write a regular file whole or not at all (a temporary file in the same directory, then a rename, with
    the usual mode); write through a device or FIFO (``-o /dev/null``) and never replace it."""
    import stat

    check_outputs([path])
    try:
        if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
            with open(path, "wb") as handle:
                handle.write(data)
            return
        directory = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".topoplan-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as err:
        raise _cannot_write(path, err.strerror or str(err)) from None


def write_figure(fig, path: str) -> str:
    """Save a chart through ``write_file_atomic``; the format follows the extension (PNG when there is none
    or matplotlib does not know it). Returns what was written, for the message."""
    from .report import plots

    extension = os.path.splitext(path)[1].lower().lstrip(".")
    fmt = extension if extension in ("png", "svg", "pdf") else "png"
    write_file_atomic(path, plots.to_bytes(fig, fmt))
    return f"{path} ({fmt.upper()})" if extension != fmt else path


def _catalog(files):
    """The catalog with the user's files, each entry they override named on stderr (file order decides)."""
    catalog = load_catalog(files)
    for section, entry_id, where, replaced in catalog.overrides:
        click.echo(f"catalog: {where}: {section} '{entry_id}' overrides the entry from {replaced}", err=True)
    return catalog


class Progress:
    """Progress of long work on stderr, in lines that read as well in a CI log as in a terminal: the
    estimate first when it says the run is long, then, while it runs, a line at most every ``every_s``
    seconds with the work done and the time left at the pace so far. A run of a few seconds prints
    nothing. ``flow.metrics.evaluate_workload`` calls ``start`` and ``step``; ``optimize`` calls
    ``begin`` and ``step``."""

    def __init__(self, command: str, unit: str = "phases", every_s: float = 5.0, long_s: float = 10.0):
        self.command, self.unit, self.every_s, self.long_s = command, unit, every_s, long_s
        self.total = self.done = 0
        self.started = self.last = 0.0

    def begin(self, total: int) -> None:
        self.total, self.done = total, 0
        self.started = self.last = time.monotonic()

    def start(self, work) -> None:
        """Routing: ``work`` is the ``flow.metrics.RoutingWork`` estimate."""
        self.begin(work.steps)
        if work.fair_shares:
            self.unit = "steps (phases routed, fair-share solves)"
        if work.minutes * 60 >= self.long_s:
            fair = (f" and {work.fair_shares} fair-share solve(s) over about {work.fair_share_entries:.2g} flow x "
                    "link entries" if work.fair_shares else "")
            click.echo(f"topoplan {self.command}: {work.routes} phase(s) to route on {work.engine}: about "
                       f"{work.search_ops:.2g} multiply-adds{fair}, about {work.minutes:,.1f} min", err=True)

    def step(self, label: str = "") -> None:
        self.done += 1
        now = time.monotonic()
        if now - self.last < self.every_s or self.done >= self.total:
            return
        self.last = now
        left_s = (now - self.started) / self.done * (self.total - self.done)
        what = f" ({label})" if label else ""
        click.echo(f"topoplan {self.command}: {self.done}/{self.total} {self.unit} done{what}, "
                   f"about {left_s:,.0f} s left", err=True)


def fabric_options(func):
    """--fabric FILE, --server ID and --switch ID: a fabric read from a file (``report``)."""
    func = click.option("--switch", "switch_id", metavar="ID", default=None,
                        help="With --fabric: the switch model where a switch's description names none.")(func)
    func = click.option("--server", "server_id", metavar="ID", default=None,
                        help="With --fabric: the catalog server the fabric's hosts are (e.g. dgx-h100); "
                             "default SPEC's.")(func)
    func = click.option("--fabric", "fabric_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                        help="Read the fabric from FILE: ibnetdiscover output or topoplan JSON (build -o x.json).")(func)
    return func


def _imported_design(spec, fabric_file, server_id, switch_id, catalog):
    """The design of an imported fabric: SPEC's (workload, routing, targets) with its fabric replaced, or a
    bare design named after the file."""
    import re

    from .errors import Problem, SpecError
    from .spec import design_from_data
    from . import yamlio

    if spec is not None:
        data, lines = yamlio.read(spec)
        if not isinstance(data, dict):
            raise SpecError([Problem(spec, 1, "", "the spec is not a mapping", "start from one of designs/")])
        cabling = (data.get("fabric") or {}).get("cabling") if isinstance(data.get("fabric"), dict) else None
    else:
        if server_id is None:
            raise SpecError([Problem("--server", 0, "", "--fabric without a SPEC needs --server ID",
                                     did_you_mean("", catalog.servers))])
        stem = re.sub(r"[^a-z0-9]+", "-", os.path.splitext(os.path.basename(fabric_file))[0].lower()).strip("-")
        data, lines, cabling = {"name": stem or "imported-fabric", "cluster": {}}, None, None
    if server_id is not None and server_id not in catalog.servers:
        raise SpecError([Problem("--server", 0, "", f"unknown server '{server_id}'",
                                 did_you_mean(server_id, catalog.servers))])
    if switch_id is not None and switch_id not in catalog.switches:
        raise SpecError([Problem("--switch", 0, "", f"unknown switch '{switch_id}'",
                                 did_you_mean(switch_id, catalog.switches))])
    cluster = {"server": server_id or (data.get("cluster") or {}).get("server")}
    data = dict(data, cluster=cluster, fabric={"topology": "imported", "file": os.path.abspath(fabric_file),
                                               **({"switch": switch_id} if switch_id else {}),
                                               **({"cabling": cabling} if cabling else {})})
    return design_from_data(data, catalog, spec or "<spec>", lines)


def _evaluate(spec: str, catalog, command: str = "report"):
    """A one-site ``pipeline.Evaluation``, or a ``sites.SitesEvaluation`` for a spec with ``sites``."""
    from . import sites
    from .pipeline import evaluate

    design = sites.load(spec, catalog)
    if isinstance(design, sites.MultiSiteDesign):
        return sites.evaluate(design, catalog, progress=Progress(command))
    return evaluate(design, catalog, progress=Progress(command))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="topoplan")
def main():
    """topoplan: plan the network of an LLM training cluster before you buy and wire it.

    \b
    Write a design as YAML (see designs/), then:
      topoplan validate designs/fat-tree-1k.yaml       check it, every problem at once
      topoplan report designs/fat-tree-1k.yaml         switches, links, cost, power, bisection
      topoplan report designs/fat-tree-1k.yaml --format markdown -o report.md
      topoplan check designs/*.yaml                    exit 1 when a spec target is missed
      topoplan compare main:designs/x.yaml designs/x.yaml --format markdown
      topoplan optimize designs/spaces/small.yaml --plot pareto.png
      topoplan host designs/fat-tree-1k.yaml           one server's PCIe/NVLink paths
      topoplan resilience designs/fat-tree-1k.yaml     failed switches and links, MTBF, goodput
      topoplan scale designs/gpt3-175b-12288.yaml --gpus 1536..12288   MFU as the cluster grows
      topoplan nccl designs/fat-tree-1k.yaml -e 8G     an nccl-tests style sweep (--measured LOG)
      topoplan build designs/fat-tree-1k.yaml -o fabric.graphml
      topoplan export designs/fat-tree-1k.yaml --to slurm-tree -o topology.conf   (astra-sim, simai, htsim, ...)
      topoplan report --fabric ibnetdiscover.txt --server dgx-h100   a real fabric, from ibnetdiscover
      topoplan catalog list                            hardware topoplan knows about
    """


@main.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path())
@catalog_option
@handle_errors
def validate(specs, catalog_files):
    """Check design specs: schema, catalog ids, and that the fabric can be built.

    \b
    Every problem in every file is listed, one per line, as FILE:LINE: key.path: message.
    Example:
      topoplan validate designs/*.yaml
    """
    from .errors import SpecError

    catalog = _catalog(catalog_files)
    problems = []
    for spec in specs:
        try:
            evaluation = _evaluate(spec, catalog, "validate")
        except TopoplanError as err:
            problems.extend(err.problems)
            continue
        d = evaluation.design
        family = getattr(d, "fabric", None)
        family = family.topology if family is not None else f"{len(d.sites)} sites"
        click.echo(f"ok: {spec}: {d.name}, {family}, {d.gpus:,} GPUs, "
                   f"{evaluation.topology.layout.tiers} tier(s)")
    if problems:
        raise SpecError(problems)


@main.command()
@click.argument("spec", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="Output file: .graphml, .gexf or .json (columnar topoplan format).")
@catalog_option
@handle_errors
def build(spec, output, catalog_files):
    """Generate the topology of SPEC and write it as GraphML, GEXF or JSON.

    \b
    GraphML and GEXF go through networkx and suit small and medium fabrics (Gephi, yEd);
    JSON is columnar (one list per node and link attribute) and suits any size.
    Example:
      topoplan build designs/fat-tree-1k.yaml -o fabric.graphml
    """
    check_outputs([output], [spec])
    from .errors import Problem, SpecError

    extension = os.path.splitext(output)[1].lower()
    if extension not in (".graphml", ".gexf", ".json"):
        raise SpecError([Problem(output, 0, "", f"unknown output format '{extension or output}'",
                                 "use a file name ending in .graphml, .gexf or .json")])
    from . import sites
    from .pipeline import build as build_topology

    catalog = _catalog(catalog_files)
    design = sites.load(spec, catalog)
    if isinstance(design, sites.MultiSiteDesign):   # the sites joined through their border switches
        topology = sites.build(design, catalog)[2]
    else:
        topology, _bom = build_topology(design, catalog)  # no routing: only the graph is written
    if extension == ".json":
        data = json.dumps(topology.to_json_dict(), separators=(",", ":")).encode()
    else:
        import io

        import networkx as nx

        if topology.num_arcs > MAX_GRAPH_EXPORT_ARCS:
            raise SpecError([Problem(output, 0, "", f"{extension[1:].upper()} of {topology.num_nodes:,} nodes and "
                                     f"{topology.num_arcs:,} arcs would take about "
                                     f"{topology.num_arcs * 4.6e3 / 2**30:,.0f} GiB of memory (networkx holds "
                                     f"every node and edge as Python objects)",
                                     "write .json (columnar, any size) instead")])
        graph = topology.to_networkx()
        graph = nx.relabel_nodes(graph, {n: d["name"] for n, d in graph.nodes(data=True)})  # readable ids
        graph.graph = {"name": topology.name}
        buffer = io.BytesIO()
        (nx.write_graphml if extension == ".graphml" else nx.write_gexf)(graph, buffer)
        data = buffer.getvalue()
    write_file_atomic(output, data)
    click.echo(f"wrote {output}: {topology.num_nodes:,} nodes, {topology.num_links:,} links", err=True)


@main.command("export")
@click.argument("spec", type=click.Path())
@click.option("--to", "fmt", required=True, type=click.Choice(tuple(EXPORTERS)), metavar="FORMAT",
              help="Format: " + "; ".join(f"{e.name}: {e.summary}" for e in EXPORTERS.values()) + ".")
@click.option("-o", "--output", required=True, type=click.Path(), metavar="PATH",
              help="Output file (a new or empty directory for astra-sim), written whole or not at all.")
@click.option("--node-names", "node_names", default=ExportOptions.node_names, show_default=True, metavar="PATTERN",
              help="Slurm and ibnetdiscover host names: a Python format of {node} (Slurm node), {server} and "
                   "{tray} (node within an NVLink rack).")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=None, metavar="N",
              help="GPUs per Slurm node [default: the server's; 4 on NVLink racks of more than 8 GPUs].")
@catalog_option
@handle_errors
def export_command(spec, fmt, output, node_names, gpus_per_node, catalog_files):
    """Write SPEC's fabric in a format another tool reads: a scheduler or a simulator.

    \b
    Where the format cannot represent the design it is refused (exit 2) with the reason; what it
    represents only approximately is said on stderr (and, for astra-sim, in NOTES.md).
    Examples:
      topoplan export designs/fat-tree-16k.yaml --to slurm-tree -o topology.conf
      topoplan export designs/gb200-nvl72-4su.yaml --to slurm-block -o topology.conf --node-names gb{node:04d}
      topoplan export designs/fat-tree-1k.yaml --to astra-sim -o astra/
      topoplan export designs/rail-b200-16k.yaml --to simai -o topo.txt
      topoplan export designs/fat-tree-16k.yaml --to htsim -o fabric.topo
      topoplan export designs/fat-tree-1k.yaml --to infragraph -o fabric.yaml
      topoplan export designs/fat-tree-1k.yaml --to ibnetdiscover -o expected.txt   diff it against the real one
    """
    from .pipeline import build as build_topology
    from .spec import load_design

    exporter = EXPORTERS[fmt]
    if exporter.directory:
        _check_output_directory(output, spec)
    else:
        check_outputs([output], [spec, *catalog_files])
    catalog = _catalog(catalog_files)
    design = load_design(spec, catalog)
    topology, _bom = build_topology(design, catalog)
    options = ExportOptions(node_names=node_names, gpus_per_node=gpus_per_node,
                            suffix=os.path.splitext(output)[1].lower())
    result = export(topology, design, catalog, fmt, options)
    if exporter.directory:
        try:
            os.makedirs(output, exist_ok=True)
        except OSError as err:
            raise _cannot_write(output, err.strerror or str(err)) from None
    for name, data in result.files:
        write_file_atomic(os.path.join(output, name) if name else output, data)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"wrote {output} ({fmt}): {result.summary}", err=True)


def _check_output_directory(path: str, spec: str) -> None:
    """A directory export goes into a new directory or an empty one, never over other files."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise _cannot_write(path, "it is a file; this format writes a directory of files", "name a new directory")
    if os.path.isdir(path) and os.listdir(path):
        raise _cannot_write(path, "the directory is not empty", "name a new or empty directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise _cannot_write(path, f"the directory {parent} does not exist", "create it first or write elsewhere")


@main.command()
@click.argument("spec", type=click.Path(), required=False)
@page_format_option
@output_option
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Also write charts to DIR: link utilization by tier and time per collective (PNG).")
@fabric_options
@catalog_option
@handle_errors
def report(spec, fmt, output, plots_dir, fabric_file, server_id, switch_id, catalog_files):
    """Report what SPEC takes to build and how its network performs.

    \b
    Switches and links per tier, bill of materials, cost (total, per GPU, by category), power,
    bisection bandwidth and diameter. The markdown form is meant for a pull request comment.
    With --fabric, the fabric is read from a file instead (ibnetdiscover output, or topoplan's JSON):
    alone it is reported as it is; with SPEC, SPEC's workload runs on it.
    Examples:
      topoplan report designs/fat-tree-16k.yaml
      topoplan report designs/fat-tree-16k.yaml --format markdown -o design-report.md
      topoplan report designs/fat-tree-16k.yaml --format json | jq .cost
      topoplan report designs/rail-b200-16k.yaml --plots charts/
      topoplan report designs/llama3-405b-2-sites.yaml --plots charts/   # WAN bandwidth vs utilisation
      ibnetdiscover > fabric.txt;  topoplan report --fabric fabric.txt --server dgx-h100
      topoplan report designs/fat-tree-1k.yaml --fabric fabric.txt    the design's workload on the real fabric
      topoplan report designs/fat-tree-1k.yaml --format html -o report.html   # one page, opens offline
    """
    check_html_output(fmt, output)
    check_outputs([output], [spec, fabric_file, *catalog_files])
    if plots_dir and os.path.exists(plots_dir) and not os.path.isdir(plots_dir):
        raise _cannot_write(plots_dir, "it is a file, not a directory", "name a directory for the charts")
    catalog = _catalog(catalog_files)
    if fabric_file is None:
        if spec is None:
            raise click.UsageError("give a SPEC, or --fabric FILE (with --server ID)")
        evaluation = _evaluate(spec, catalog)
    else:
        from .pipeline import evaluate

        evaluation = evaluate(_imported_design(spec, fabric_file, server_id, switch_id, catalog), catalog,
                              progress=Progress("report"))
    result = build_report(evaluation)
    if fmt == "html":
        from .report.html import render_report_html
        from .report.page import page_extras

        write_output(render_report_html(result, page_extras(evaluation, result)), output)
    else:
        write_output(render(result, fmt), output)
    if plots_dir:
        from .report import plots

        name = evaluation.design.name
        if "wan_requirement" in result:   # a multi-site design: utilisation against WAN bandwidth
            try:
                os.makedirs(plots_dir, exist_ok=True)
            except OSError as err:
                raise _cannot_write(plots_dir, err.strerror or str(err)) from None
            path = os.path.join(plots_dir, f"{name}-wan.png")
            click.echo(f"wrote {write_figure(plots.wan_figure(result), path)}", err=True)
            return
        if not any(c["time_s"] is not None for c in result["collectives"]):
            click.echo("no charts: the spec's workload has no collective that could be routed", err=True)
            return
        try:
            os.makedirs(plots_dir, exist_ok=True)
        except OSError as err:
            raise _cannot_write(plots_dir, err.strerror or str(err)) from None
        for suffix, fig in (("utilization", plots.utilization_figure(evaluation)),
                            ("collectives", plots.collective_times_figure(result))):
            path = os.path.join(plots_dir, f"{name}-{suffix}.png")
            click.echo(f"wrote {write_figure(fig, path)}", err=True)


@main.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path())
@click.option("--baseline", metavar="REF", default=None,
              help="Git reference to compare against: each SPEC is also read as REF:SPEC.")
@click.option("--max-regression", metavar="PCT", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="With --baseline: fail when a metric gets worse by more than PCT percent.")
@catalog_option
@handle_errors
def check(specs, baseline, max_regression, catalog_files):
    """Hold each spec's targets against its report; exit 1 when any is missed.

    \b
    One line per target: 'ok' or 'MISS', the design, the target, the value and the limit.
    With --baseline, also one line per metric that regressed against the same spec at REF.
    Examples:
      topoplan check designs/*.yaml
      topoplan check designs/fabric.yaml --baseline origin/main --max-regression 2
    """
    from .review import metric_rows
    from .targets import check_targets

    catalog = _catalog(catalog_files)
    evaluations = [(spec, _evaluate(spec, catalog, "check")) for spec in specs]
    from .review import MissingAtRef

    baselines = {}
    if baseline:
        for spec, _evaluation in evaluations:
            try:
                baselines[spec] = build_report(_evaluate_source(f"{baseline}:./{os.path.relpath(spec)}", catalog, "check")[1])
            except MissingAtRef:
                baselines[spec] = None  # a design added since the baseline: its own targets only
    missed = 0
    for spec, evaluation in evaluations:
        report = build_report(evaluation)
        name = evaluation.design.name
        if any(key in RESILIENCE_TARGETS for key in evaluation.design.targets):
            report["resilience"] = _assess(spec, catalog, "check")[3]["summary"]
        results = check_targets(report, evaluation.design.targets)
        if not results and not baseline:
            click.echo(f"ok   {name}: no targets in {spec}")
        for result in results:
            click.echo(result.line(name))
            missed += not result.ok
        if baseline and baselines[spec] is None:
            click.echo(f"new  {name}: {spec} is not in {baseline}, so only its own targets apply")
        elif baseline:
            regressed = 0
            for row in metric_rows(baselines[spec], report):
                worse = row.worse_by()
                if worse * 100 > max_regression + 1e-9:
                    click.echo(f"MISS {name}: {row.metric} regressed against {baseline}: {row.base} -> {row.head} "
                               f"({worse * 100:.2f}% worse, limit {max_regression:g}%)")
                    regressed += 1
            if not regressed:
                click.echo(f"ok   {name}: no metric regressed more than {max_regression:g}% against {baseline}")
            missed += regressed
    if missed:
        click.echo(f"{missed} check(s) failed", err=True)
        sys.exit(EXIT_TARGET_MISSED)


RESILIENCE_TARGETS = ("max_interruptions_per_day", "min_goodput", "max_single_failure_slowdown")


def _assess(spec: str, catalog, command: str = "resilience", workers: int = 1, executor=None):
    """(design, topology, assessment, report dict) of ``topoplan resilience``; ``executor`` (optional) runs
    the failure runs, else ``workers`` processes."""
    import numpy as np

    from .flow import RouteRequest, select_engine
    from .pipeline import build as build_stage
    from .report.resilience import resilience_report
    from .resilience import assess
    from .spec import load_design
    from .topology import LINK_TIER

    design = load_design(spec, catalog)
    topology, _bom = build_stage(design, catalog)
    try:
        assessment = assess(topology, design, catalog, design.failures, Progress(command, "failure runs"),
                            usable_workers(command, workers) if executor is None else 1, executor)
    except EngineRefused as err:
        raise design.infeasible("failures", str(err), "choose scenarios the engine can route, or a smaller "
                                "fabric") from None
    engine = select_engine(topology, RouteRequest(design.routing.engine)).name
    network = np.flatnonzero(topology.link_tier != LINK_TIER["host"])
    if network.size:
        one_down = np.ones(topology.num_arcs, dtype=bool)
        one_down[network[:2]] = False
        degraded = select_engine(topology, RouteRequest(design.routing.engine, arc_mask=one_down)).name
        engine = f"{engine}; with failures {degraded}" if degraded != engine else engine
    return design, topology, assessment, resilience_report(design, topology, assessment, engine)


@main.command()
@click.argument("spec", type=click.Path())
@format_option
@output_option
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False), default=None, metavar="PNG",
              help="Also write a chart of the worst slowdown per failure class (PNG).")
@executor_options
@catalog_option
@handle_errors
def resilience(spec, fmt, output, plot_file, executor_name, scheduler, workers, catalog_files):
    """What failed switches, links, NICs, servers or planes do to SPEC's job, and what failures cost.

    \b
    For each scenario of the spec's 'failures:' section (default: every single switch and every
    single link, one run per symmetry class): whether the job stops, the GPUs that stop it, the
    worst host bandwidth kept, the degraded bisection, and each collective's slowdown against
    healthy. Then interruptions per day from published failure rates times the fabric's counts,
    the job's MTBF, Young's and Daly's checkpoint intervals and the goodput they leave.
    Examples:
      topoplan resilience designs/fat-tree-16k.yaml
      topoplan resilience designs/hpn-pod-15k.yaml --format markdown -o resilience.md
      topoplan resilience designs/fat-tree-16k.yaml --format json | jq .summary
      topoplan resilience designs/fat-tree-1k.yaml --plot failures.png
      topoplan resilience designs/fat-tree-131k-twin-plane.yaml --workers 2
      topoplan resilience designs/fat-tree-16k.yaml --executor dask --scheduler tcp://10.0.0.1:8786
    Failure runs are the tasks (--executor, --workers, --scheduler as for optimize); the topology goes
    to each worker once.
    """
    from .report.writers import render_resilience

    check_outputs([output, plot_file], [spec, *catalog_files])
    catalog = _catalog(catalog_files)
    executor = make_sweep_executor("resilience", executor_name, scheduler, workers, None, "failure run")
    _design, _topology, _assessment, result = _assess(spec, catalog, executor=executor)
    write_output(render_resilience(result, fmt), output)
    if plot_file:
        from .report import plots

        click.echo(f"wrote {write_figure(plots.resilience_figure(result), plot_file)}", err=True)


@main.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path())
@click.option("--gpus", "gpu_text", required=True, metavar="LIST",
              help="GPU counts: 1024,2048,4096 or a doubling range 1024..131072.")
@click.option("--batch", "batch_mode", type=click.Choice(("fixed", "per-gpu")), default="fixed", show_default=True,
              help="Keep the spec's global batch at every size, or keep it per GPU (it grows with the cluster).")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False), default=None, metavar="PNG",
              help="Also write a chart of MFU and scaling efficiency against GPUs, one line per design.")
@format_option
@output_option
@executor_options
@cache_options
@catalog_option
@handle_errors
def scale(specs, gpu_text, batch_mode, plot_file, fmt, output, executor_name, scheduler, workers, cache_dir,
          no_cache, cache_size, catalog_files):
    """Step time, MFU and scaling efficiency of each SPEC's training job as the cluster grows.

    \b
    Each size regenerates the fabric from the spec's family and switches (the fewest tiers that
    hold it, pods and scalable units re-sized), keeps tp, cp and pp and lets dp follow; the global batch stays fixed (--batch fixed)
    or grows with the GPUs (--batch per-gpu). A size the fabric or the layout cannot reach is listed
    as infeasible with the reason. Scaling efficiency is tokens/s per GPU against the smallest size
    that ran. The spec must name a model (workload.model).
    Examples:
      topoplan scale designs/llama3-405b-fat-tree.yaml --gpus 8192..131072
      topoplan scale designs/llama3-405b-fat-tree.yaml designs/llama3-405b-rail-only.yaml --gpus 8192..131072 --plot scale.png
      topoplan scale designs/gpt3-175b-12288.yaml --gpus 1536,3072,6144,12288 --batch per-gpu --format markdown
      topoplan scale designs/llama3-405b-fat-tree.yaml --gpus 8192..131072 --executor dask
    Every (spec, size) point is one task (--executor, --workers, --scheduler as for optimize) and
    is cached by content (--cache DIR, --no-cache).
    """
    from .executors import RunStats
    from .report.writers import render_scale
    from .scaling import SweepFailed, parse_gpu_list, scale_designs, study_dict

    try:
        sizes = parse_gpu_list(gpu_text)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--gpus") from None
    check_outputs([output, plot_file], [*specs, *catalog_files])
    catalog = _catalog(catalog_files)
    total, done = len(sizes) * len(specs), [0]
    started = time.monotonic()

    def progress(point):
        done[0] += 1
        if time.monotonic() - started > 5 and done[0] < total:
            click.echo(f"topoplan scale: {done[0]}/{total} sizes done ({point.gpus:,} GPUs)", err=True)

    executor = make_sweep_executor("scale", executor_name, scheduler, workers, total, "size")
    cache = open_cache("scale", cache_dir, no_cache, cache_size)
    stats = RunStats()
    failures = []
    try:
        studies = scale_designs(specs, catalog, sizes, batch_mode, progress, executor, cache, stats)
    except SweepFailed as err:
        studies, failures = err.studies, [(label, e) for _, label, e in err.failures]
    if stats.cached or stats.failed or (cache is not None and (cache.corrupt or cache.write_error)):
        report_sweep("scale", stats, cache, "points")
    studies = [study_dict(study) for study in studies]
    write_output(render_scale(studies, fmt), output)
    if plot_file:
        from .report import plots

        click.echo(f"wrote {write_figure(plots.scale_figure(studies), plot_file)}", err=True)
    report_failures("scale", failures)


def _evaluate_source(source: str, catalog, command: str = "compare"):
    """(spec data, evaluation) of a spec file or a REF:path git reference."""
    from . import sites
    from .pipeline import evaluate
    from .review import read_spec_source
    from .spec import design_from_data

    data, lines, label = read_spec_source(source)
    if sites.is_multi_site(data):
        design = sites.multi_site_from_data(data, catalog, label, lines)
        return data, sites.evaluate(design, catalog, progress=Progress(command))
    return data, evaluate(design_from_data(data, catalog, label, lines), catalog, progress=Progress(command))


@main.command()
@click.argument("base")
@click.argument("head")
@page_format_option
@output_option
@catalog_option
@handle_errors
def compare(base, head, fmt, output, catalog_files):
    """Compare two designs: changed spec fields and every metric side by side.

    \b
    BASE and HEAD are spec files or git references REF:path, so CI can compare a pull
    request with its base without a second checkout. Metrics that got worse are marked.
    Examples:
      topoplan compare designs/fat-tree-16k.yaml designs/rail-b200-16k.yaml
      topoplan compare main:designs/pod.yaml designs/pod.yaml --format markdown -o comment.md
      topoplan compare main:designs/pod.yaml designs/pod.yaml --format html -o compare.html
    """
    check_html_output(fmt, output)
    check_outputs([output], [base, head, *catalog_files])
    from .report.writers import render_compare
    from .review import compare_reports

    catalog = _catalog(catalog_files)
    base_data, base_eval = _evaluate_source(base, catalog)
    head_data, head_eval = _evaluate_source(head, catalog)
    head_report = build_report(head_eval)
    comparison = compare_reports(base, head, base_data, head_data, build_report(base_eval), head_report)
    if fmt == "html":
        from .report.html import render_compare_html
        from .report.page import targets

        write_output(render_compare_html(comparison, targets(head_eval, head_report)), output)
    else:
        write_output(render_compare(comparison, fmt), output)


def _size_option(text: str) -> int:
    from .units import parse_test_size

    try:
        return parse_test_size(text)
    except (ValueError, TypeError) as err:
        raise click.BadParameter(str(err)) from None


@main.command()
@click.argument("spec", type=click.Path())
@click.option("--op", "op_text", default="all_reduce", show_default=True, metavar="OP",
              help="Collective, as nccl-tests names it (all_reduce, all_gather, reduce_scatter, alltoall, "
                   "broadcast, reduce, sendrecv) or as the spec does (allreduce, ...).")
@click.option("--group", default="world", show_default=True, metavar="GROUP",
              help="Parallel group it runs over: world, tp, cp, dp, pp or ep (the spec's parallelism).")
@click.option("--algorithm", default="auto", show_default=True, metavar="NAME",
              help="auto (NCCL's tuner: fastest algorithm and protocol per size) or one to force.")
@click.option("-b", "--minbytes", "begin", default="8", show_default=True, metavar="SIZE",
              help="Smallest size; K, M, G are powers of 1024 as in nccl-tests.")
@click.option("-e", "--maxbytes", "end", default="8G", show_default=True, metavar="SIZE", help="Largest size.")
@click.option("-f", "--stepfactor", "factor", type=click.IntRange(min=1), default=2, show_default=True,
              help="Multiply the size by this between rows.")
@click.option("--measured", "logs", multiple=True, type=click.Path(dir_okay=False), metavar="LOG",
              help="An nccl-tests output (text or -J JSON) to hold the prediction against, at its own sizes "
                   "(repeatable: one table per log).")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False), default=None, metavar="PNG",
              help="Also chart busbw against size (predicted, and measured with --measured).")
@click.option("--fit", "fit_file", type=click.Path(dir_okay=False), default=None, metavar="YAML",
              help="With one --measured log: fit an extra latency per step and a bandwidth efficiency for the "
                   "spec's server to it, and write them as a catalog override to pass with --catalog.")
@format_option
@output_option
@catalog_option
@handle_errors
def nccl(spec, op_text, group, algorithm, begin, end, factor, logs, plot_file, fit_file, fmt, output,
         catalog_files):
    """Sweep one collective over sizes as nccl-tests runs it, and hold it against real logs.

    \b
    The table has nccl-tests' own columns (size, count, type, redop, root, time, algbw, busbw)
    plus the algorithm and protocol NCCL's tuner would pick. Routing runs once; every size
    reuses it. With --measured, predicted busbw sits beside the log's, with the error and a
    summary (median and worst over sizes from 1 MiB).
    Examples:
      topoplan nccl designs/fat-tree-1k.yaml --op all_reduce --group world -b 8 -e 8G -f 2
      topoplan nccl designs/fat-tree-1k.yaml --group dp --format markdown -o dp-sweep.md
      topoplan nccl my-cluster.yaml --measured all_reduce.log --plot busbw.png
      topoplan nccl my-cluster.yaml --measured all_reduce.log --fit calibrated.yaml
      topoplan report my-cluster.yaml --catalog calibrated.yaml
    """
    check_outputs([output, plot_file, fit_file], [spec, *logs, *catalog_files])
    from .errors import Problem, SpecError
    from .flow.algorithms import FOR_OP
    from .generators import generate
    from .nccltests import read_log
    from .report.writers import render_sweep
    from .spec import PARALLEL_GROUPS, load_design
    from .sweep import TEST_NAMES, against_log, op_name, sizes_from, sweep

    op = op_name(op_text)
    problems = []
    if op is None:
        problems.append(Problem("--op", 0, "", f"unknown collective '{op_text}'", did_you_mean(op_text, TEST_NAMES)))
    elif algorithm not in FOR_OP[op]:
        problems.append(Problem("--algorithm", 0, "", f"{op} has no '{algorithm}' algorithm",
                                "use one of: " + ", ".join(FOR_OP[op])))
    if group not in PARALLEL_GROUPS:
        problems.append(Problem("--group", 0, "", f"unknown group '{group}'", did_you_mean(group, PARALLEL_GROUPS)))
    if op is not None and op not in TEST_NAMES.values() and (logs or fit_file):
        problems.append(Problem("--measured", 0, "", f"{op} has no nccl-tests binary, so no log measures it",
                                "sweep it without --measured/--fit, or measure a collective nccl-tests runs"))
    if fit_file and len(logs) != 1:
        problems.append(Problem("--fit", 0, "", "--fit needs exactly one --measured log",
                                "pass the nccl-tests log of this machine with --measured LOG"))
    if problems:
        raise SpecError(problems)
    catalog = _catalog(catalog_files)
    design = load_design(spec, catalog)
    topology = generate(design, catalog)
    if fit_file:
        from . import yamlio
        from .sweep import fit_to_log

        log = read_log(logs[0])
        fit = fit_to_log(design, catalog, op, group, log, algorithm, topology)
        write_file_atomic(fit_file, yamlio.dump(fit.override(catalog, logs[0])).encode("utf-8"))
        before, after = fit.before["median_abs_error"], fit.after["median_abs_error"]
        click.echo(f"fitted {fit.server}: +{fit.network_step_extra_us:.2f} us per network step, "
                   f"+{fit.intra_step_extra_us:.2f} us per intra-node step, bandwidth efficiency "
                   f"{fit.bandwidth_efficiency:.3f}; median busbw error from 1 MiB {before:.1%} -> {after:.1%}; "
                   f"wrote {fit_file} (pass it with --catalog)", err=True)
        catalog = _catalog((*catalog_files, fit_file))
    results = []
    if logs:
        for path in logs:
            log = read_log(path)
            result = against_log(design, catalog, op, group, log, algorithm, topology)
            if log.ranks and log.ranks != result.group_size:
                click.echo(f"topoplan nccl: warning: {path} ran {log.ranks:,} ranks, the {group} group of "
                           f"{design.name} has {result.group_size:,}; compare like with like", err=True)
            results.append(result)
    else:
        sizes = sizes_from(_size_option(begin), _size_option(end), factor)
        click.echo(f"topoplan nccl: routing {op} over {group} once, then {len(sizes)} sizes", err=True)
        results.append(sweep(design, catalog, op, group, sizes, algorithm, topology))
    texts = [render_sweep(r.to_json(), fmt) for r in results]
    if fmt == "json":
        data = [r.to_json() for r in results]
        text = json.dumps(data[0] if len(data) == 1 else data, indent=2) + "\n"
    else:
        text = "\n".join(texts)
    write_output(text, output)
    if plot_file:
        from .report import plots

        click.echo(f"wrote {write_figure(plots.sweep_figure([r.to_json() for r in results]), plot_file)}", err=True)


@main.command()
@output_option
@catalog_option
@handle_errors
def schema(output, catalog_files):
    """Print the JSON Schema of design specs (the validator's own definitions).

    \b
    Point your editor at it for validation while typing; with the YAML language server, put
    this first line in a spec:
      # yaml-language-server: $schema=../docs/design.schema.json
    Catalog ids (servers, switches, circuit switches) are listed as examples for completion;
    --catalog adds your own entries to them.
    Example:
      topoplan schema -o docs/design.schema.json
      topoplan schema --catalog my-hardware.yaml -o my.schema.json
    """
    check_outputs([output], catalog_files)
    from .sites import SITES_SCHEMA
    from .spec import DESIGN_SCHEMA

    catalog = _catalog(catalog_files)
    one_site, multi_site = DESIGN_SCHEMA.to_json_schema(), SITES_SCHEMA.to_json_schema()
    for properties in (one_site["properties"], multi_site["properties"]["sites"]["items"]["properties"]):
        properties["cluster"]["properties"]["server"]["examples"] = sorted(catalog.servers)
        properties["fabric"]["properties"]["switch"]["examples"] = sorted(catalog.switches)
        properties["fabric"]["properties"]["railx"]["properties"]["ocs"]["examples"] = sorted(catalog.ocs)
    multi_site["properties"]["wan"]["properties"]["border_switch"]["examples"] = sorted(catalog.switches)
    document = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "topoplan design spec",
                "description": "one site (cluster and fabric), or several sites joined by WAN links",
                "$defs": {"one_site": one_site, "multi_site": multi_site},
                "if": {"type": "object", "required": ["sites"]}, "then": {"$ref": "#/$defs/multi_site"},
                "else": {"$ref": "#/$defs/one_site"}}
    write_output(json.dumps(document, indent=2) + "\n", output)


@main.command()
@click.argument("space_file", metavar="SPACE", type=click.Path())
@page_format_option
@output_option
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Cost vs completion-time chart with the Pareto front (.png or .svg), and FILE-cost: the "
                   "Pareto designs' cost by category.")
@click.option("--emit-specs", "emit_dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Write one design spec per Pareto design into DIR.")
@click.option("--max-candidates", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Refuse a space with more candidates than this (they are counted before any work).")
@executor_options
@cache_options
@catalog_option
@handle_errors
def optimize(space_file, fmt, output, plot_file, emit_dir, max_candidates, executor_name, scheduler, workers,
             cache_dir, no_cache, cache_size, catalog_files):
    """Search a design space: evaluate every candidate, keep the cost / completion-time Pareto front.

    \b
    SPACE is YAML listing GPU counts, servers, topologies, switches, oversubscription ratios and
    planes, the workload, constraints and collective weights (see docs/optimize.md). Every
    combination is built, costed and routed; infeasible ones are counted by reason. Optional:
    RailX candidates (railx: {servers, ocs}) and CP-SAT sized fat-trees (sizing: {fat_tree: true}).
    Examples:
      topoplan optimize designs/spaces/small.yaml
      topoplan optimize designs/spaces/headline.yaml --workers 2 --plot headline.png
      topoplan optimize space.yaml --workers 2 --plot pareto.png --emit-specs chosen/ --format markdown
      topoplan optimize space.yaml --executor dask --scheduler tcp://10.0.0.1:8786 --format json
      topoplan optimize designs/spaces/small.yaml --format html -o front.html
    Results are cached by content (--cache DIR, --no-cache): a candidate whose resolved spec and
    catalog entries are unchanged is read back, not evaluated again.
    """
    plot_outputs = [plot_file, f"{os.path.splitext(plot_file)[0]}-cost{os.path.splitext(plot_file)[1] or '.png'}"] \
        if plot_file else []
    check_html_output(fmt, output)
    check_outputs([output, *plot_outputs], [space_file, *catalog_files])
    if emit_dir and os.path.exists(emit_dir) and not os.path.isdir(emit_dir):
        raise _cannot_write(emit_dir, "it is a file, not a directory", "name a directory for the emitted specs")
    from .errors import Problem, SpecError
    from .optimize.search import search
    from .optimize.space import load_space
    from .report.writers import render_optimize

    catalog = _catalog(catalog_files)
    space = load_space(space_file, catalog)
    from .optimize.space import candidate_specs

    import itertools

    candidates = sum(1 for _ in itertools.islice(candidate_specs(space), max_candidates + 1))  # bounded count
    if candidates > max_candidates:
        raise SpecError([Problem(space_file, 0, "", f"the space holds more than --max-candidates "
                                 f"{max_candidates:,} candidates",
                                 "narrow the space, or raise --max-candidates if you mean it")])
    executor = make_sweep_executor("optimize", executor_name, scheduler, workers, candidates, "candidate")
    cache = open_cache("optimize", cache_dir, no_cache, cache_size)
    click.echo(f"topoplan optimize: {candidates:,} candidates on {executor.describe()}", err=True)
    progress = Progress("optimize", "candidates")
    progress.begin(candidates)

    def evaluated(_done, _total):
        progress.step()

    result = search(space, catalog_files, progress=evaluated, executor=executor, cache=cache,
                    keep_infeasible=False, catalog=catalog)
    report_sweep("optimize", result.stats, cache, "candidates")
    data = result.to_json()
    if result.failures and not data["candidates"]:
        report_failures("optimize", result.failures)
    if not data["candidates"]:
        raise SpecError([Problem(space_file, 0, "", f"no candidate is feasible: {n} x {reason}",
                                 "relax the constraints or widen the space")
                         for reason, n in data["infeasible"]["reasons"].items()])
    if fmt == "html":
        from .report.html import render_optimize_html

        write_output(render_optimize_html(data), output)
    else:
        write_output(render_optimize(data, fmt), output)
    if plot_file:
        from .report import plots

        stem, extension = os.path.splitext(plot_file)
        wrote = write_figure(plots.pareto_figure(data), plot_file)
        breakdown = write_figure(plots.cost_breakdown_figure(data), f"{stem}-cost{extension or '.png'}")
        click.echo(f"wrote {wrote} and {breakdown}", err=True)
    if emit_dir:
        from . import yamlio

        os.makedirs(emit_dir, exist_ok=True)
        by_name = {o.name: o.spec for o in result.feasible}
        for name in data["pareto"]:
            text = f"# emitted by topoplan optimize from {os.path.basename(space_file)}\n" + yamlio.dump(by_name[name])
            write_file_atomic(os.path.join(emit_dir, f"{name}.yaml"), text.encode())
        click.echo(f"wrote {len(data['pareto'])} spec(s) to {emit_dir}", err=True)
    report_failures("optimize", result.failures)


@main.command()
@click.argument("source", type=click.Path())
@click.option("--server", "server_id", metavar="ID", default=None,
              help="For nvidia-smi text: take bandwidths from this server's catalog template, by path class.")
@format_option
@output_option
@catalog_option
@handle_errors
def host(source, server_id, fmt, output, catalog_files):
    """Analyse one server's PCIe/NVLink topology: a design spec (its server's catalog template), an NCCL
    topology XML, or `nvidia-smi topo -m` text.

    \b
    For every GPU-GPU and GPU-NIC pair: the path class (NV#, PIX, PXB, PHB, NODE, SYS) and the
    bottleneck bandwidth by NCCL's rules (not from nvidia-smi, which gives no speeds); the GPU-to-NIC
    assignment (closest first, no NIC serving two GPUs while another is idle) and each GPU's bandwidth
    when all send at once; the best intra-host ring order against the naive one; warnings.
    Examples:
      topoplan host designs/fat-tree-1k.yaml
      NCCL_TOPO_DUMP_FILE=system.xml <run any NCCL job>;  topoplan host system.xml
      nvidia-smi topo -m > topo.txt;  topoplan host topo.txt --server dgx-h100 --format markdown
    """
    check_outputs([output], [source, *catalog_files])
    from .host import read_host
    from .host.analysis import host_report
    from .report.host import render_host

    if source.endswith((".yaml", ".yml")):
        from .host.template import host_graph
        from .spec import load_design

        catalog = _catalog(catalog_files)
        design = load_design(source, catalog)
        graph = host_graph(catalog.servers[design.cluster.server], catalog)
    else:
        graph = read_host(source)
    if server_id:
        from .errors import Problem, SpecError
        from .host.template import host_graph

        catalog = _catalog(catalog_files)
        if server_id not in catalog.servers:
            raise SpecError([Problem("--server", 0, "", f"unknown server '{server_id}'",
                                     did_you_mean(server_id, catalog.servers))])
        if graph.has_bandwidth:
            raise SpecError([Problem("--server", 0, "", "this input has its own bandwidths",
                                     "use --server with nvidia-smi text only")])
        graph.borrow_bandwidths(host_graph(catalog.servers[server_id], catalog))
    write_output(render_host(host_report(graph), fmt), output)


@main.group()
def catalog():
    """List and inspect the hardware catalog (shipped entries plus --catalog files)."""


@catalog.command("list")
@click.option("--section", type=click.Choice(SECTIONS), default=None, help="Only this section.")
@catalog_option
@handle_errors
def catalog_list(section, catalog_files):
    """List catalog entries by section.

    \b
    Examples:
      topoplan catalog list
      topoplan catalog list --section switches
      topoplan catalog list --catalog my-prices.yaml
    """
    from .report.writers import table

    cat = _catalog(catalog_files)
    lines = []
    for name in SECTIONS if section is None else (section,):
        entries = cat.section(name)
        if not entries:
            continue
        rows = []
        for entry_id in sorted(entries):
            e = entries[entry_id]
            price = f"${e.price_usd:,.0f}" if hasattr(e, "price_usd") else "-"
            power = f"{e.power_w:,.0f} W" if hasattr(e, "power_w") else "-"
            rows.append((entry_id, getattr(e, "vendor", getattr(e, "kind", "")), _describe(name, e), price, power))
        lines += [f"{name} ({len(rows)})"] + table(["id", "vendor", "summary", "price", "power"], rows, False,
                                                   right=(3, 4)) + [""]
    lines.append("Prices are estimates (see each entry's source); override them with --catalog FILE.")
    click.echo("\n".join(lines))


def _describe(section: str, e) -> str:
    if section == "switches":
        return f"{e.ports}x{e.port_speed_gbps:g}G" + "".join(f", {b.ports}x{b.port_speed_gbps:g}G" for b in e.breakouts)
    if section == "nics":
        return f"{e.ports}x{e.port_speed_gbps:g}G, PCIe Gen{e.pcie_gen} x{e.pcie_lanes}"
    if section == "transceivers":
        return f"{e.speed_gbps:g}G {e.form_factor} {e.media}, {e.reach_m:g} m"
    if section == "cables":
        return f"{e.kind} {e.speed_gbps:g}G, {e.reach_m:g} m" if e.speed_gbps else f"{e.kind}, {e.reach_m:g} m"
    if section == "ocs":
        return f"{e.ports} ports"
    if section == "gpus":
        fp8 = f", FP8 {e.fp8_tflops:,.0f}" if e.fp8_tflops else ""
        return f"BF16 {e.bf16_tflops:,.0f} TFLOP/s{fp8}, {e.hbm_gb:g} GB, matmul {100 * e.matmul_efficiency:.1f}%"
    if section == "models":
        from .training import counts
        c = counts(e)
        moe = f", {c.active / 1e9:,.1f}B active, {e.experts} experts top-{e.top_k}" if e.experts else ""
        return f"{c.total / 1e9:,.1f}B parameters{moe}, {e.layers} layers, h {e.hidden:,}, seq {e.seq_len:,}"
    return f"{e.gpus}x {e.gpu}, {e.nics}x {e.nic}"


@catalog.command("show")
@click.argument("entry_id")
@catalog_option
@handle_errors
def catalog_show(entry_id, catalog_files):
    """Show one catalog entry with every field and its source.

    \b
    Example:
      topoplan catalog show nvidia-qm9700
    """
    import dataclasses

    from . import yamlio
    from .errors import Problem, SpecError

    cat = _catalog(catalog_files)
    section, entry = cat.find(entry_id)
    if entry is None:
        every = [i for _, i in cat.ids()]
        raise SpecError([Problem("catalog", 0, "", f"no entry with id '{entry_id}'", did_you_mean(entry_id, every))])
    data = dataclasses.asdict(entry)
    if "breakouts" in data:
        data["breakouts"] = [dict(b) for b in data["breakouts"]]
    if "gpu_nics" in data:
        data["gpu_nics"] = list(data["gpu_nics"])
    click.echo(f"# {section}, defined at {cat.origin[(section, entry_id)]}")
    click.echo(yamlio.dump(data), nl=False)


if __name__ == "__main__":
    main()
