"""A content-addressed cache of evaluations on disk: an evaluation whose inputs hash the same is read back,
not recomputed.

The key is the SHA-256 of a canonical JSON document (sorted keys, no spaces) of what the evaluation reads:
the task's own data (a candidate's resolved spec, a scaling point's sized spec), the catalog entries it
uses, the cache format and a fingerprint of topoplan's own source code, so a new version of the code never
reads an old result. ``content_key`` builds it.

Each entry is one file ``DIR/ab/abcdef....json``: a header line (format, key, SHA-256 and length of the
payload) and the payload. A file that does not parse, names another key, or whose payload does not match
its checksum is not trusted: the evaluation runs again and overwrites it. Entries are written to a
temporary file in the same directory and renamed into place (``os.replace``), so concurrent writers (two
runs sharing a cache) never leave a half-written entry, only one whole one. The cache is bounded: after a
run that wrote entries, the least recently used ones (modification time, refreshed on every hit) are
removed until the total is under ``max_bytes``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from .catalog import Catalog

CACHE_FORMAT = 1
DEFAULT_MAX_BYTES = 2 * 2**30
STALE_TEMP_S = 3600.0     # temporary files older than this are a crashed writer's: removed by prune


def default_cache_dir() -> Path:
    """``$TOPOPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/topoplan``, else ``~/.cache/topoplan``."""
    if os.environ.get("TOPOPLAN_CACHE_DIR"):
        return Path(os.environ["TOPOPLAN_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "topoplan"


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """SHA-256 over topoplan's Python sources (path and bytes), so results of other code never match."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def canonical(data) -> str:
    """The one JSON text of ``data``: sorted keys, no spaces, tuples as lists."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)


def content_key(kind: str, data, entries: dict) -> str:
    """SHA-256 of the evaluation ``kind``, its ``data`` and the catalog ``entries`` it uses (``{"section/id":
    entry fields}``), the cache format and the code fingerprint."""
    document = {"format": CACHE_FORMAT, "code": code_fingerprint(), "kind": kind, "data": data,
                "entries": entries}
    return hashlib.sha256(canonical(document).encode()).hexdigest()


class CacheError(Exception):
    """The cache directory cannot be used (why, for the user)."""


class Cache:
    """Entries under ``directory`` (created if missing). ``get``/``put`` take the payload as JSON text.
    Counters: ``hits``, ``misses``, ``corrupt`` (entries found and not trusted), ``written``; a failure to
    write disables writing and is kept in ``write_error`` (the caller warns)."""

    def __init__(self, directory, max_bytes: int = DEFAULT_MAX_BYTES):
        self.directory = Path(directory)
        self.max_bytes = int(max_bytes)
        self.hits = self.misses = self.corrupt = self.written = self.evicted = 0
        self.write_error = ""
        if self.directory.exists() and not self.directory.is_dir():
            raise CacheError(f"{self.directory} is a file, not a directory")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".probe-", dir=self.directory)
            os.close(fd)
            os.unlink(probe)
        except OSError as err:
            raise CacheError(f"cannot write to {self.directory}: {err.strerror or err}") from None

    def path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        """The payload stored under ``key``, or None (missing, or not trusted)."""
        path = self.path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            self.misses += 1
            return None
        except OSError:
            self.misses += 1
            self.corrupt += 1
            return None
        payload = self._validated(raw, key)
        if payload is None:
            self.misses += 1
            self.corrupt += 1
            return None
        self.hits += 1
        try:
            os.utime(path)   # recently used: evicted last
        except OSError:
            pass
        return payload

    @staticmethod
    def _validated(raw: bytes, key: str) -> str | None:
        head, newline, body = raw.partition(b"\n")
        if not newline:
            return None
        try:
            header = json.loads(head)
            if not isinstance(header, dict) or header.get("format") != CACHE_FORMAT or header.get("key") != key:
                return None
            if header.get("bytes") != len(body) or header.get("sha256") != hashlib.sha256(body).hexdigest():
                return None
            return body.decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return None

    def put(self, key: str, payload: str) -> None:
        if self.write_error:
            return
        body = payload.encode("utf-8")
        header = canonical({"format": CACHE_FORMAT, "key": key, "bytes": len(body),
                            "sha256": hashlib.sha256(body).hexdigest()}).encode()
        path = self.path(key)
        tmp = None
        try:
            path.parent.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
            with os.fdopen(fd, "wb") as handle:
                handle.write(header + b"\n" + body)
            os.replace(tmp, path)
            tmp = None
            self.written += 1
        except OSError as err:
            self.write_error = f"cannot write to the cache {self.directory}: {err.strerror or err}"
        finally:
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)

    def entries(self) -> list[tuple[float, int, Path]]:
        """(modification time, size, path) of every entry."""
        out = []
        for sub in self.directory.iterdir() if self.directory.is_dir() else ():
            if not sub.is_dir() or len(sub.name) != 2:
                continue
            for path in sub.iterdir():
                try:
                    st = path.stat()
                except OSError:
                    continue
                if path.name.startswith(".tmp-"):
                    if time.time() - st.st_mtime > STALE_TEMP_S:
                        _unlink(path)
                    continue
                if path.suffix == ".json":
                    out.append((st.st_mtime, st.st_size, path))
        return out

    def size_bytes(self) -> int:
        return sum(size for _, size, _ in self.entries())

    def prune(self) -> int:
        """Remove the least recently used entries until the total is at most ``max_bytes``; how many."""
        entries = sorted(self.entries(), key=lambda e: (e[0], e[2].name))
        total = sum(size for _, size, _ in entries)
        removed = 0
        for _, size, path in entries:
            if total <= self.max_bytes:
                break
            if _unlink(path):
                total -= size
                removed += 1
        self.evicted += removed
        return removed


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except OSError:
        return False


class EntryDigests:
    """SHA-256 of each catalog entry's fields, computed once per entry."""

    def __init__(self, catalog: Catalog):
        self.catalog, self.memo = catalog, {}

    def __call__(self, refs) -> dict:
        out = {}
        for section, entry_id in refs:
            ref = f"{section}/{entry_id}"
            if ref not in self.memo:
                entry = self.catalog.section(section).get(entry_id)
                fields = None if entry is None else dataclasses.asdict(entry)
                self.memo[ref] = hashlib.sha256(canonical(fields).encode()).hexdigest()
            out[ref] = self.memo[ref]
        return out


def entries_used(spec: dict, sizing: dict | None, catalog: Catalog) -> list[tuple[str, str]]:
    """The catalog entries a candidate's evaluation reads: its server with that server's NIC and GPU, its
    switch models (or those sizing chooses from), its circuit switch, its model preset, and every
    transceiver and cable (the bill of materials picks the cheapest that fits). A price change on any other
    entry leaves the candidate's key, and so its cached result, as it was. tests/test_cache_keys.py runs
    evaluations of every shipped space on a catalog that records each entry read and checks that this
    list names them all: an evaluation that starts reading a new entry fails there until it is named here."""
    refs = set()
    places = spec["sites"] if isinstance(spec.get("sites"), list) else [spec]   # a multi-site candidate's sites
    for place in places:
        server_id = (place.get("cluster") or {}).get("server")
        refs.add(("servers", server_id))
        server = catalog.servers.get(server_id)
        if server is not None:
            refs.add(("nics", server.nic))
            refs.add(("gpus", str(server.gpu).lower()))
        fabric = place.get("fabric") or {}
        switch = fabric.get("switch")
        for model in (switch.values() if isinstance(switch, dict) else [switch] if switch else []):
            refs.add(("switches", model))
        if isinstance(fabric.get("railx"), dict) and fabric["railx"].get("ocs"):
            refs.add(("ocs", fabric["railx"]["ocs"]))
    border = (spec.get("wan") or {}).get("border_switch")
    if border:
        refs.add(("switches", border))
    for model in (sizing or {}).get("switches", []):
        refs.add(("switches", model))
    model = (spec.get("workload") or {}).get("model")
    preset = model if isinstance(model, str) else model.get("preset") if isinstance(model, dict) else None
    if preset:
        refs.add(("models", preset))
    for section in ("transceivers", "cables"):
        refs.update((section, entry_id) for entry_id in catalog.section(section))
    return sorted(refs, key=lambda r: (r[0], str(r[1])))
