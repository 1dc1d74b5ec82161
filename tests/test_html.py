"""The HTML pages (``--format html``) of report, optimize and compare, loaded in a real headless browser.

The browser is Debian's ``chromium`` driven through its command line (``--dump-dom``, ``--screenshot``);
nothing downloads one. Without it these tests skip, unless ``CI`` is set: then they fail. Every shipped
design's page is rendered once for the module and loaded once in the browser.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from topoplan.catalog import load_catalog
from topoplan.cli import _evaluate, main
from topoplan.report import build_report
from topoplan.report.html import render_report_html
from topoplan.report.page import page_extras
from topoplan.report.writers import render, usd

ROOT = Path(__file__).resolve().parent.parent
DESIGNS = sorted(p.name for p in (ROOT / "designs").glob("*.yaml"))
CHROMIUM = os.environ.get("TOPOPLAN_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
MAX_PAGE_BYTES = 2 * 2**20


def need_browser():
    if CHROMIUM:
        return
    if os.environ.get("CI"):
        pytest.fail("chromium is missing: .ci/run installs it (apt-get install chromium); CI must run the "
                    "browser tests")
    pytest.skip("chromium is not installed (apt-get install chromium)")


def _browser(*args, fragment: str = "", path: Path) -> tuple[str, list]:
    """Run headless chromium on a file: (standard output, console lines)."""
    with tempfile.TemporaryDirectory(prefix="topoplan-chromium-") as profile:
        done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args,
                               path.resolve().as_uri() + fragment],
                              capture_output=True, text=True, timeout=120, cwd=profile)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console


def dump_dom(path: Path, fragment: str = "") -> tuple[str, list]:
    return _browser("--dump-dom", path=path, fragment=fragment)


def dump_doms(paths: list) -> dict:
    """Load many pages (files in one folder) in one browser run: a harness page holds each in an iframe
    and, once all have loaded, copies each frame's DOM into a textarea. Returns {path: (DOM, console lines
    from that page)}; a frame whose DOM cannot be read fails the harness's script, so its console too."""
    folder = paths[0].parent
    frames = "".join(f'<iframe src="{p.name}"></iframe>' for p in paths)
    harness = folder / "harness.html"
    harness.write_text(
        f"<!DOCTYPE html><html><body>{frames}<script>\n"
        "window.addEventListener('load', function () {\n"
        "  document.querySelectorAll('iframe').forEach(function (frame, i) {\n"
        "    var copy = document.createElement('textarea');\n"
        "    copy.id = 'page-' + i;\n"
        "    copy.textContent = frame.contentDocument.documentElement.outerHTML;\n"
        "    document.body.appendChild(copy);\n"
        "  });\n"
        "});\n</script></body></html>")
    dom, console = _browser("--allow-file-access-from-files", "--dump-dom", path=harness)
    copies = {e.attrs["id"]: e.text for e in parse(dom) if e.tag == "textarea"}
    assert len(copies) == len(paths), console
    harness_errors = [line for line in console if harness.name in line]
    assert harness_errors == []
    return {p: (copies[f"page-{i}"], [line for line in console if f"/{p.name} " in line or f"/{p.name}\"" in line])
            for i, p in enumerate(paths)}


class Element:
    def __init__(self, tag, attrs):
        self.tag, self.attrs, self.parts, self.children = tag, dict(attrs), [], []

    @property
    def text(self) -> str:
        return "".join(p if isinstance(p, str) else p.text for p in self.parts)

    def iter(self):
        yield self
        for child in self.children:
            yield from child.iter()


class _Tree(HTMLParser):
    VOID = {"meta", "input", "br", "img", "link", "hr", "col", "source", "wbr", "area", "base", "embed"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Element("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        element = Element(tag, attrs)
        self.stack[-1].children.append(element)
        self.stack[-1].parts.append(element)
        if tag not in self.VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag, attrs):
        element = Element(tag, attrs)
        self.stack[-1].children.append(element)
        self.stack[-1].parts.append(element)

    def handle_endtag(self, tag):
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data):
        self.stack[-1].parts.append(data)


def parse(html: str) -> list:
    tree = _Tree()
    tree.feed(html)
    return list(tree.root.iter())[1:]


def by_id(elements, name):
    found = [e for e in elements if e.attrs.get("id") == name]
    assert len(found) == 1, f"{len(found)} elements with id {name}"
    return found[0]


def value(element):
    """The exact figure a cell carries (None where the report has none)."""
    raw = element.attrs["data-value"]
    return None if raw == "" else float(raw)


def remote_references(html: str) -> list:
    """Everything in the page that a browser would fetch from the network: src/href attributes (and
    xlink:href, srcset, poster, data) with a scheme or a protocol-relative //, CSS url(...) and @import."""
    found = []
    for element in parse(html):
        for name, content in element.attrs.items():
            if name in ("src", "href", "xlink:href", "srcset", "poster", "data", "action") and content and \
                    re.match(r"\s*([a-z][a-z0-9+.-]*:|//)", content, re.I) and not content.startswith("data:"):
                found.append(f"<{element.tag} {name}={content}>")
            if name == "style" and re.search(r"url\s*\(|@import", content or "", re.I):
                found.append(f"<{element.tag} style={content}>")
        if element.tag == "style" and re.search(r"url\s*\(|@import", element.text, re.I):
            found.append("a url() or @import in a <style>")
        if element.tag in ("link", "iframe", "object", "embed", "img", "video", "audio"):
            found.append(f"a <{element.tag}> element")
        if element.tag == "script" and "src" in element.attrs:
            found.append(f"<script src={element.attrs['src']}>")
    return found


@pytest.fixture(scope="module")
def shipped_pages(tmp_path_factory):
    """Per shipped design: the JSON report (as the json format writes it), the HTML page's path and text,
    and, with a browser, its dumped DOM and console lines."""
    catalog = load_catalog()
    folder = tmp_path_factory.mktemp("pages")
    pages = {}
    for name in DESIGNS:
        evaluation = _evaluate(str(ROOT / "designs" / name), catalog)
        report = build_report(evaluation)
        path = folder / name.replace(".yaml", ".html")
        html = render_report_html(report, page_extras(evaluation, report))
        path.write_text(html, encoding="utf-8")
        pages[name] = {"json": json.loads(render(report, "json")), "path": path, "html": html}
    if CHROMIUM:
        loaded = dump_doms([p["path"] for p in pages.values()])
        for page in pages.values():
            dom, console = loaded[page["path"]]
            page.update(dom=dom, console=console, elements=parse(dom))
    return pages


def test_every_shipped_design_writes_one_page_that_fetches_nothing(shipped_pages):
    assert len(shipped_pages) == len(DESIGNS) >= 19
    for name, page in shipped_pages.items():
        assert remote_references(page["html"]) == [], name
        assert len(page["html"].encode()) <= MAX_PAGE_BYTES, name


def test_remote_reference_check_catches_what_it_looks_for():
    assert remote_references('<link rel="stylesheet" href="https://cdn.example/x.css">')
    assert remote_references('<script src="//cdn.example/x.js"></script>')
    assert remote_references("<style>@import 'x.css'; body { background: url(http://x/y.png) }</style>")
    assert remote_references('<div style="background: url(https://x/y.png)"></div>')
    assert remote_references('<a href="#bom">BOM</a><p>see https://example.org in the text</p>') == []


def test_report_command_writes_html_and_refuses_the_terminal(tmp_path, in_root):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", "designs/fat-tree-1k.yaml", "--format", "html", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("<!DOCTYPE html>") and "fat-tree-1k" in out.read_text()
    for args in (["report", "designs/fat-tree-1k.yaml"], ["optimize", "designs/spaces/small.yaml"],
                 ["compare", "designs/fat-tree-1k.yaml", "designs/fat-tree-16k.yaml"]):
        result = CliRunner().invoke(main, [*args, "--format", "html"])
        assert result.exit_code == 2, args
        assert "written to a file, not to the terminal" in result.stderr and "-o FILE.html" in result.stderr
        assert "Traceback" not in result.output


def test_pages_load_in_chromium_without_console_errors(shipped_pages):
    need_browser()
    for name, page in shipped_pages.items():
        assert page["console"] == [], name
        body = next(e for e in page["elements"] if e.tag == "body")
        assert body.attrs.get("data-script") == "ran", name   # the page's script ran to its end
        assert by_id(page["elements"], "js-errors").text == "", name


def test_dom_numbers_equal_the_json_report(shipped_pages):
    need_browser()
    for name, page in shipped_pages.items():
        assert_numbers_equal(page["json"], page["elements"], name)


def test_with_scripts_off_every_number_is_on_the_page(shipped_pages):
    """The page as written, before any script runs (what a browser with scripts off shows), has every
    figure; and the scripts add none (the figures after they ran are the same)."""
    for name, page in shipped_pages.items():
        written = parse(page["html"])
        assert_numbers_equal(page["json"], written, name)
        assert all("hidden" in e.attrs for e in written if e.tag == "input"), name   # no dead filter boxes
    need_browser()
    for name, page in shipped_pages.items():
        figures = [sorted(e.attrs["data-value"] for e in elements if "data-value" in e.attrs)
                   for elements in (parse(page["html"]), page["elements"])]
        assert figures[0] == figures[1], name


def assert_numbers_equal(report: dict, elements: list, name: str) -> None:
    """Total cost, switches per tier, each collective's time, algbw and busbw, and bisection: the exact
    figure (data-value) equal to the JSON report's, and the text shown agreeing with it."""
    total = by_id(elements, "total-cost")
    assert value(total) == report["cost"]["total_usd"], name
    assert total.text == usd(report["cost"]["total_usd"]), name
    assert value(by_id(elements, "bisection")) == report["bisection"]["gbps"], name
    assert value(by_id(elements, "switches-total")) == report["fabric"]["switches"]["total"], name
    tiers = {e.attrs["data-switches-tier"]: e for e in elements if "data-switches-tier" in e.attrs}
    assert set(tiers) == set(report["fabric"]["switches"]["by_tier"]), name
    for tier, count in report["fabric"]["switches"]["by_tier"].items():
        assert value(tiers[tier]) == count and tiers[tier].text == f"{count:,}", (name, tier)
    rows = {e.attrs["data-collective"]: e for e in elements
            if e.tag == "tr" and "data-collective" in e.attrs and e.attrs.get("class") != "bottleneck-row"}
    assert list(rows) == [c["name"] for c in report["collectives"]], name
    for c in report["collectives"]:
        cells = {e.attrs["data-field"]: e for e in rows[c["name"]].iter() if "data-field" in e.attrs}
        for field in ("time_s", "busbw_GBps", "algbw_GBps"):
            assert value(cells[field]) == c[field], (name, c["name"], field)
        if c["busbw_GBps"] is not None:
            shown = float(cells["busbw_GBps"].text.replace(",", ""))
            assert shown == pytest.approx(c["busbw_GBps"], rel=1e-3), (name, c["name"])
            assert float(cells["time_s"].text.replace(",", "")) == pytest.approx(c["time_s"] * 1e3, rel=1e-3)


def test_131k_pages_aggregate_instead_of_listing_links(shipped_pages):
    big = {n: p for n, p in shipped_pages.items() if p["json"]["design"]["gpus"] >= 100_000}
    assert len(big) >= 3
    for name, page in big.items():
        assert len(page["html"].encode()) <= MAX_PAGE_BYTES
        assert page["json"]["fabric"]["links"]["total"] > 300_000
        elements = page.get("elements") or parse(page["html"])
        assert len(elements) < 5_000, name   # no element per link


def test_multi_site_page_has_sites_wan_and_its_chart(shipped_pages):
    page = shipped_pages["llama3-405b-2-sites.yaml"]
    elements = parse(page["html"])
    report = page["json"]
    assert [e.attrs["data-site"] for e in elements if "data-site" in e.attrs] == [s["name"] for s in report["sites"]]
    assert value(by_id(elements, "wan-total")) == report["wan"]["total_gbps"]
    assert [e.attrs["data-scheme"] for e in elements if "data-scheme" in e.attrs] == \
        [s["label"] for s in report["wan_requirement"]["schemes"]]
    chart = next(e for e in elements if e.tag == "svg" and "WAN" in e.attrs.get("aria-label", ""))
    lines = [e for e in chart.iter() if e.tag == "polyline" and e.attrs["class"].startswith("series")]
    assert len(lines) == len(report["wan_requirement"]["curve"]["utilization"])


def test_railx_page_shows_its_grid(shipped_pages):
    elements = parse(shipped_pages["railx-100k.yaml"]["html"])
    grid = next(e for e in elements if e.attrs.get("data-value") == "112x112")
    assert "112 rows x 112 columns of 8-chip nodes" in grid.text
    nodes = [e for e in elements if e.tag == "rect" and e.attrs.get("class") == "node"]
    assert len(nodes) == 16 * 16   # at most 16 x 16 of the grid drawn


def test_screenshot_of_the_1k_report_is_not_blank(shipped_pages, tmp_path):
    need_browser()
    import matplotlib.image

    shot = tmp_path / "shot.png"
    _browser(f"--screenshot={shot}", "--window-size=1280,800", "--hide-scrollbars",
             path=shipped_pages["fat-tree-1k.yaml"]["path"])
    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[:2] == (800, 1280)
    colours = {tuple(p) for p in (pixels[::8, ::8, :3] * 255).astype(int).reshape(-1, 3)}
    assert len(colours) > 20 and pixels[..., :3].std() > 0.1


def test_tables_sort_and_filter_in_the_browser(shipped_pages):
    need_browser()
    path = shipped_pages["fat-tree-1k.yaml"]["path"]
    dom, console = dump_dom(path, "#sort=bom:5:desc")
    assert console == []
    bom = by_id(parse(dom), "bom")
    prices = [value(row.children[5]) for row in bom.iter() if row.tag == "tr" and row.children[0].tag == "td"]
    assert len(prices) > 3 and prices == sorted(prices, reverse=True)
    assert prices != [b["price_usd"] for b in shipped_pages["fat-tree-1k.yaml"]["json"]["bom"]]  # it moved rows
    dom, _ = dump_dom(path, "#filter=bom:spine")
    rows = [row for row in by_id(parse(dom), "bom").iter() if row.tag == "tr" and row.children[0].tag == "td"]
    shown = [row for row in rows if "hidden" not in row.attrs]
    assert shown and len(shown) < len(rows) and all("spine" in row.text for row in shown)


def test_free_text_from_the_spec_renders_as_text(tmp_path):
    data = yaml.safe_load((ROOT / "designs/fat-tree-1k.yaml").read_text())
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)> & \"quoted\" 'single'"
    data["description"] = hostile
    spec = tmp_path / "hostile.yaml"
    spec.write_text(yaml.safe_dump(data))
    out = tmp_path / "hostile.html"
    result = CliRunner().invoke(main, ["report", str(spec), "--format", "html", "-o", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "<script>alert" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert by_id(parse(html), "description").text == hostile
    need_browser()
    dom, console = dump_dom(out)
    elements = parse(dom)
    assert console == []
    assert by_id(elements, "description").text == hostile
    assert not [e for e in elements if e.tag == "img"]
    assert all("alert" not in e.text for e in elements if e.tag == "script")


def test_optimize_page(tmp_path, in_root):
    data = yaml.safe_load((ROOT / "designs/spaces/small.yaml").read_text())
    data["gpus"] = [1020, 1024]   # 1,020 is not a whole number of servers: infeasible, counted by reason
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data))
    out = tmp_path / "front.html"
    result = CliRunner().invoke(main, ["optimize", str(space), "--format", "html", "-o", str(out)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["optimize", str(space), "--format", "json"])   # from the cache
    front = json.loads(result.stdout)
    html = out.read_text()
    assert remote_references(html) == []
    elements = parse(html)
    points = [e for e in elements if e.tag == "circle"]
    solid = [e for e in points if e.attrs["class"] == "front"]
    faint = [e for e in points if e.attrs["class"] == "dominated"]
    assert len(solid) == len(front["pareto"]) and len(solid) + len(faint) == len(front["candidates"])
    by_name = {c["name"]: c for c in front["candidates"]}
    for point in solid:
        tip = next(e for e in point.children if e.tag == "title").text
        name = tip.split(":", 1)[0]
        assert name in front["pareto"] and f"spec {name}.yaml" in tip
        assert usd(by_name[name]["cost_per_gpu_usd"]) in tip
    rows = [e.attrs["data-candidate"] for e in elements if "data-candidate" in e.attrs]
    assert sorted(rows) == sorted(front["pareto"])
    reasons = {e.attrs["data-reason"]: int(e.attrs["data-value"]) for e in elements if "data-reason" in e.attrs}
    assert reasons == front["infeasible"]["reasons"] and sum(reasons.values()) > 0
    need_browser()
    dom, console = dump_dom(out)
    assert console == [] and 'data-script="ran"' in dom
    assert len([e for e in parse(dom) if e.tag == "circle"]) == len(points)


def _markdown_changes(text: str) -> tuple[set, set]:
    """(metrics, spec fields) that the markdown compare lists as changed."""
    metrics, fields, section = set(), set(), None
    for line in text.splitlines():
        if line.startswith("### "):
            section = line[4:].strip()
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells or cells[0] in ("Metric", "Field") or set(cells[0]) <= {"-", ":"}:
            continue
        if section == "Metrics" and cells[3]:
            metrics.add(cells[0])
        if section == "Spec changes":
            fields.add(cells[0].strip("`"))
    return metrics, fields


def test_compare_page_marks_every_change_the_markdown_lists(tmp_path, in_root):
    data = yaml.safe_load((ROOT / "designs/fat-tree-1k.yaml").read_text())
    data["fabric"]["oversubscription"] = 3
    data["description"] = "the same cluster, <b>3:1</b> at the leaves"
    head = tmp_path / "head.yaml"
    head.write_text(yaml.safe_dump(data))
    args = ["compare", "designs/fat-tree-1k.yaml", str(head)]
    markdown = CliRunner().invoke(main, [*args, "--format", "markdown"])
    out = tmp_path / "compare.html"
    page = CliRunner().invoke(main, [*args, "--format", "html", "-o", str(out)])
    assert page.exit_code == markdown.exit_code == 0
    metrics, fields = _markdown_changes(markdown.stdout)
    assert metrics and fields == {"description", "fabric.oversubscription"}
    elements = parse(out.read_text())
    rows = [e for e in elements if e.tag == "tr" and "data-metric" in e.attrs]
    marked = {e.attrs["data-metric"] for e in rows if e.attrs.get("data-changed") == "yes"}
    assert marked == metrics
    for row in rows:
        changed = row.attrs["data-metric"] in metrics
        assert all(("changed" in cell.attrs.get("class", "")) == changed for cell in row.children[1:4])
    assert {e.attrs["data-spec-path"] for e in elements if "data-spec-path" in e.attrs} == fields
    regressions = [e.attrs["data-regression"] for e in elements if "data-regression" in e.attrs]
    assert regressions and [r.attrs["data-metric"] for r in rows[:len(regressions)]] == regressions
    assert "regression" not in rows[len(regressions)].attrs.get("class", "")
    need_browser()
    dom, console = dump_dom(out)
    assert console == [] and 'data-script="ran"' in dom


def test_compare_exit_code_is_the_same_for_html_on_bad_input(tmp_path, in_root):
    out = tmp_path / "compare.html"
    for fmt in ("markdown", "html"):
        result = CliRunner().invoke(main, ["compare", "designs/fat-tree-1k.yaml", "designs/no-such.yaml",
                                           "--format", fmt, "-o", str(out)])
        assert result.exit_code == 2 and "Traceback" not in result.output
    assert not out.exists()


@pytest.mark.parametrize("seed", range(20))
def test_hottest_arcs_are_the_busiest(seed):
    import numpy as np

    from topoplan.flow.metrics import HOTTEST_ARCS, _hottest

    rng = np.random.default_rng(seed)
    seconds = rng.integers(0, [3, 50, 10_000][seed % 3], size=int(rng.integers(1, 20_000))).astype(float)
    worst = int(np.argmax(seconds))
    expected = np.argsort(-seconds, kind="stable")[:HOTTEST_ARCS]
    assert list(seconds[_hottest(seconds, worst)]) == list(seconds[expected])


def test_hottest_links_top_out_at_each_collectives_busiest_link(shipped_pages):
    for name in ("fat-tree-1k.yaml", "rail-b200-16k.yaml", "fat-tree-131k-twin-plane.yaml"):
        elements = parse(shipped_pages[name]["html"])
        table = by_id(elements, "hottest")
        rows = [row for row in table.iter() if row.tag == "tr" and row.children[0].tag == "td"]
        busiest = {}
        for row in rows:
            assert " -> " in row.children[2].text
            busiest[row.children[0].text] = max(busiest.get(row.children[0].text, 0.0), value(row.children[4]))
        report = shipped_pages[name]["json"]
        assert busiest == {c["name"]: pytest.approx(c["max_link_utilization"], rel=1e-6)
                           for c in report["collectives"] if c["time_s"] is not None}, name
