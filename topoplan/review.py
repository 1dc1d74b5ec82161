"""Design review: what a change to a spec does, for pull requests and CI gates.

* ``read_spec_source("designs/x.yaml")`` or ``read_spec_source("main:designs/x.yaml")`` (a git
  reference, read with ``git show`` so CI need not check out the base);
* ``spec_diff(base, head)``: the spec fields that changed, as dotted paths (a semantic diff of the data,
  list items with a ``name`` keyed by it);
* ``metric_rows(base_report, head_report)``: every compared metric side by side with its absolute and
  relative change, and whether it got worse (``regression``).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from . import yamlio
from .errors import Problem, SpecError
from .metrics import COLLECTIVE_METRICS, COMPARED_SECTIONS, REPORT_METRICS


def looks_like_ref(source: str) -> bool:
    """``REF:path`` (and not a plain path that exists, nor a Windows drive)."""
    return ":" in source and not os.path.exists(source) and len(source.split(":", 1)[0]) > 1


class MissingAtRef(SpecError):
    """The path does not exist at that git reference (a design added since)."""


def read_spec_source(source: str):
    """(data, lines, label) of a spec file or a ``REF:path`` git reference."""
    if not looks_like_ref(source):
        data, lines = yamlio.read(source)
        return data, lines, source
    ref, path = source.split(":", 1)
    hint = "write REF:path, e.g. main:designs/x.yaml, from inside the repository"
    if ref.startswith("-") or path.startswith("-"):
        # a git option, not a revision (``--output=FILE`` would make git write a file)
        raise SpecError([Problem(source, 0, "", f"'{ref}' is not a git reference: it starts with '-'", hint)])

    def git(*args):
        try:
            return subprocess.run(["git", *args], capture_output=True, check=False)
        except OSError as err:
            raise SpecError([Problem(source, 0, "", f"cannot run git: {err}", "install git, or pass a file")]) \
                from None

    def failed(done, what):
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return SpecError([Problem(source, 0, "", f"{what}: {reason[-1] if reason else 'git failed'}", hint)])

    verified = git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if verified.returncode != 0:
        raise SpecError([Problem(source, 0, "", f"'{ref}' is not a commit in this repository", hint)])
    done = git("cat-file", "blob", f"{verified.stdout.decode().strip()}:{path}")
    if done.returncode != 0:
        if git("cat-file", "-e", f"{verified.stdout.decode().strip()}:{path}").returncode != 0:
            raise MissingAtRef([Problem(source, 0, "", f"no file {path} at {ref}", hint)])
        raise failed(done, "cannot read this git reference")
    if len(done.stdout) > yamlio.MAX_FILE_BYTES:
        raise SpecError([Problem(source, 0, "", "the file at this reference is far larger than a spec", hint)])
    try:
        text = done.stdout.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError([Problem(source, 0, "", "the file at this reference is not UTF-8 text (binary?)",
                                 "point REF:path at a YAML spec")]) from None
    data, lines = yamlio.load(text, source)
    return data, lines, source


def _flatten(value, prefix="") -> dict:
    out = {}
    if isinstance(value, dict):
        for key in value:
            out.update(_flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list):
        named = all(isinstance(v, dict) and "name" in v for v in value) and value
        for index, item in enumerate(value):
            key = f"{prefix}[{item['name']}]" if named else f"{prefix}[{index}]"
            out.update(_flatten(item, key))
    else:
        out[prefix] = value
    return out


def spec_diff(base: dict, head: dict) -> list[dict]:
    """Changed spec fields: ``{path, base, head}`` (None where the field is absent)."""
    a, b = _flatten(base or {}), _flatten(head or {})
    return [{"path": path, "base": a.get(path), "head": b.get(path)}
            for path in sorted(set(a) | set(b)) if a.get(path) != b.get(path)]


def _get(report: dict, path: str):
    value = report
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


@dataclass
class MetricRow:
    metric: str
    base: object
    head: object
    better: str

    @property
    def delta(self):
        if isinstance(self.base, (int, float)) and isinstance(self.head, (int, float)):
            return self.head - self.base
        return None

    @property
    def relative(self):
        d = self.delta
        if d is None or not self.base:
            return None
        return d / abs(self.base)

    def worse_by(self) -> float:
        """Relative worsening (0 when not worse); a categorical change or a lost value counts as 1."""
        if self.base is not None and self.head is None:
            return 1.0
        d = self.delta
        if d is None or not self.better:
            return 0.0
        worse = d > 0 if self.better == "lower" else d < 0
        if not worse:
            return 0.0
        return abs(d) / abs(self.base) if self.base else 1.0

    @property
    def regression(self) -> bool:
        return self.worse_by() > 1e-9


def metric_rows(base: dict, head: dict) -> list[MetricRow]:
    rows = [MetricRow(m.path, m.get(base), m.get(head), m.better) for m in REPORT_METRICS
            if m.compared and not (m.get(base) is None and m.get(head) is None)]
    for section, better in COMPARED_SECTIONS:
        keys = sorted(set(_get(base, section) or {}) | set(_get(head, section) or {}))
        rows += [MetricRow(f"{section}.{k}", (_get(base, section) or {}).get(k, 0),
                           (_get(head, section) or {}).get(k, 0), better) for k in keys]
    base_c = {c["name"]: c for c in base.get("collectives", [])}
    head_c = {c["name"]: c for c in head.get("collectives", [])}
    for name in list(base_c) + [n for n in head_c if n not in base_c]:
        for m in COLLECTIVE_METRICS:
            if m.compared:
                rows.append(MetricRow(f"collectives.{name}.{m.path}", base_c.get(name, {}).get(m.path),
                                      head_c.get(name, {}).get(m.path), m.better))
    return rows


def compare_reports(base_label: str, head_label: str, base_spec, head_spec, base: dict, head: dict) -> dict:
    """The comparison as one JSON-able dict (the ``compare --format json`` contract)."""
    rows = metric_rows(base, head)
    return {
        "base": {"source": base_label, "name": base["design"]["name"]},
        "head": {"source": head_label, "name": head["design"]["name"]},
        "spec_changes": spec_diff(base_spec, head_spec),
        "metrics": [{"metric": r.metric, "base": r.base, "head": r.head, "delta": r.delta,
                     "relative": r.relative, "better": r.better or None, "regression": r.regression}
                    for r in rows],
        "regressions": [r.metric for r in rows if r.regression],
    }
