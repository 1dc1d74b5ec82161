"""The text of ``nvidia-smi topo -m`` into a ``HostGraph`` of path classes.

The matrix gives each pair's path class (``X``, ``NV#``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``) and
each GPU's CPU and NUMA affinity, but no link speeds: the result says so (``has_bandwidth`` is False),
and bandwidths must come from an NCCL topology file or a template.

Quirks handled, as seen in pasted outputs: tab-separated cells with empty fields (``0\\t\\tN/A``), a
header that starts with a tab, NIC columns named ``NIC#`` with a "NIC Legend" mapping them to ``mlx5_#``
or named ``mlx5_#`` directly (older drivers), no ``GPU NUMA ID`` column (older drivers), and lost tabs
that glue cells together (``NODENODE``), read by matching cell tokens one after another.
"""

from __future__ import annotations

import re

from ..errors import Problem, SpecError
from .graph import HostGraph

TOKEN = re.compile(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS")
DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx5_\d+)$")


def _error(file: str, line: int, message: str, hint: str) -> SpecError:
    return SpecError([Problem(file, line, "", message, hint)])


def parse(text: str, file: str = "<nvidia-smi>") -> HostGraph:
    lines = text.splitlines()
    header_at = next((i for i, line in enumerate(lines) if line.split() and line.split()[0] == "GPU0"), None)
    if header_at is None:
        raise _error(file, 0, "no matrix found: no header line starting with GPU0",
                     "paste the whole output of `nvidia-smi topo -m`")
    columns = []
    for word in lines[header_at].split():
        if not DEVICE.match(word):
            break
        columns.append(word)
    legend = {}
    for line in lines:
        found = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line)
        if found:
            legend[found.group(1)] = found.group(2)
    graph = HostGraph(source=file, has_bandwidth=False)
    node_of = {}
    for name in columns:
        kind = "gpu" if name.startswith("GPU") else "nic"
        node_of[name] = graph.add(kind, legend.get(name, name), -1, None)
    rows = 0
    for number, line in enumerate(lines[header_at + 1:], start=header_at + 2):
        if not line.strip() or line.strip().startswith("Legend"):
            break
        name, _, rest = line.strip().partition(" ") if "\t" not in line.strip() else line.strip().partition("\t")
        name = name.strip()
        if name not in node_of:
            raise _error(file, number, f"row '{name}' is not a column of the header",
                         "every GPU and NIC row must also be a header column")
        cells, position = [], 0
        while len(cells) < len(columns):
            while position < len(rest) and rest[position] in " \t":
                position += 1
            found = TOKEN.match(rest, position)
            if not found:
                word = rest[position:].split()[0] if rest[position:].split() else "end of line"
                raise _error(file, number, f"row {name}: '{word}' is not a path class "
                             f"(expected {len(columns)} of X, NV#, PIX, PXB, PHB, NODE, SYS; found {len(cells)})",
                             "check for a missing or extra column in this row")
            cells.append(found.group(0))
            position = found.end()
        affinity = [field.strip() for field in re.split(r"\t|\s{2,}", rest[position:].strip())]
        if name.startswith("GPU") and affinity and affinity[0]:
            graph.affinity[node_of[name]] = {"cpus": affinity[0], "numa": affinity[1] if len(affinity) > 1 else ""}
        for column, cell in zip(columns, cells):
            if column == name:
                if cell != "X":
                    raise _error(file, number, f"row {name}: the diagonal is '{cell}', not X",
                                 "rows and columns must list the devices in the same order")
                continue
            if cell == "X":
                raise _error(file, number, f"row {name}, column {column}: X off the diagonal",
                             "rows and columns must list the devices in the same order")
            graph.classes[(node_of[name], node_of[column])] = cell
            if cell.startswith("NV"):
                graph.nvlink[(node_of[name], node_of[column])] = int(cell[2:])
        rows += 1
    if rows == 0:
        raise _error(file, header_at + 1, "the matrix has a header but no rows", "paste the rows under the header")
    graph.notes.append("nvidia-smi topo -m gives path classes but no link speeds: bandwidths are not known")
    return graph


def read(file: str) -> HostGraph:
    try:
        with open(file, encoding="utf-8") as handle:
            return parse(handle.read(), file)
    except (OSError, UnicodeDecodeError) as err:
        raise _error(file, 0, f"cannot read file: {err}", "check the path") from None
