"""Safe YAML loading that remembers where every key came from, and rejects duplicate keys.

``load(text, filename)`` returns ``(data, lines)``: plain dicts, lists and scalars, plus a mapping from a
key path (a tuple such as ``("fabric", "tiers")`` or ``("workload", "collectives", 0, "size")``) to the
1-based line it sits on. Errors point into the file through that mapping.
"""

from __future__ import annotations

import yaml

from .errors import Problem, SpecError

Path = tuple


class LineMap(dict):
    """Key path -> line; ``line_of`` falls back to the nearest parent that has a line."""

    def line_of(self, path) -> int:
        path = tuple(path)
        while path:
            if path in self:
                return self[path]
            path = path[:-1]
        return self.get((), 1)


def dotted(path) -> str:
    """``("workload", "collectives", 0, "size")`` -> ``workload.collectives[0].size``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


# A spec, catalog or design space is a few hundred values; aliases that expand past this are refused
# (a ten-line "billion laughs" file would otherwise take minutes and gigabytes)
MAX_VALUES = 200_000
MAX_FILE_BYTES = 16 * 2**20


class _Budget:
    def __init__(self, limit: int):
        self.left = limit


def load(text: str, filename: str):
    """Parse one YAML document safely; raise ``SpecError`` for syntax errors, duplicate keys, documents
    that expand past ``MAX_VALUES`` values (alias bombs) and nesting too deep to parse."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
    except RecursionError:
        raise SpecError([Problem(filename, 0, "", "YAML nested too deeply to read",
                                 "specs nest a few levels; check the file is what you meant to pass")]) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark else 0
        message = " ".join(str(x) for x in (err.context, err.problem) if x)
        raise SpecError([Problem(filename, line, "", f"YAML syntax error: {message}",
                                 "check indentation, colons and quotes on this line or the one above")]) from None
    except yaml.YAMLError as err:
        raise SpecError([Problem(filename, 0, "", f"YAML error: {err}", "")]) from None
    finally:
        loader.dispose()
    lines = LineMap()
    problems: list[Problem] = []
    if root is None:
        return None, lines
    lines[()] = root.start_mark.line + 1
    try:
        data = _build(root, (), lines, problems, filename, loader, _Budget(MAX_VALUES))
    except _TooLarge as err:
        raise SpecError([Problem(filename, err.line, "", f"the document expands to more than {MAX_VALUES:,} values",
                                 "YAML aliases (*name) that repeat large anchors multiply; write the values out")]) \
            from None
    except RecursionError:
        raise SpecError([Problem(filename, 0, "", "YAML nested too deeply to read", "")]) from None
    if problems:
        raise SpecError(problems)
    return data, lines


_PLAIN_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:omap")


class _TooLarge(Exception):
    def __init__(self, line: int):
        self.line = line


def _build(node, path, lines, problems, filename, loader, budget: _Budget):
    budget.left -= 1
    if budget.left < 0:
        raise _TooLarge(node.start_mark.line + 1)
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _PLAIN_TAGS:
        problems.append(Problem(filename, node.start_mark.line + 1, dotted(path),
                                f"unsupported YAML tag '{node.tag}'", "remove the '!!' tag; specs are plain data"))
        return None
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # YAML merge keys (<<)
        out = {}
        for key_node, value_node in node.value:
            key = _build(key_node, path, lines, problems, filename, loader, budget)
            if isinstance(key, (list, dict)):
                problems.append(Problem(filename, key_node.start_mark.line + 1, dotted(path),
                                        "a mapping key must be a plain value", ""))
                continue
            child = path + (key,)
            line = key_node.start_mark.line + 1
            if key in out:
                problems.append(Problem(filename, line, dotted(child),
                                        f"duplicate key '{key}' (first on line {lines[child]})",
                                        "remove one of them; YAML keeps only the last, silently"))
                continue
            lines[child] = line
            out[key] = _build(value_node, child, lines, problems, filename, loader, budget)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            child = path + (index,)
            lines[child] = item.start_mark.line + 1
            items.append(_build(item, child, lines, problems, filename, loader, budget))
        return items
    try:
        return loader.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as err:
        problems.append(Problem(filename, node.start_mark.line + 1, dotted(path),
                                f"cannot read value: {err.problem}", "remove the '!!' tag; specs are plain data"))
        return None


def read(file: str):
    """Read and parse a YAML file; unreadable files are a ``SpecError``."""
    try:
        with open(file, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)   # never all of /dev/zero or a huge file
        if len(raw) > MAX_FILE_BYTES:
            raise SpecError([Problem(str(file), 0, "", f"larger than {MAX_FILE_BYTES // 2**20} MiB, far more than a "
                                     "spec or catalog", "pass the YAML file itself")])
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError([Problem(str(file), 0, "", f"cannot read file: {err}",
                                 "check the path and that the file is UTF-8 text")]) from None
    return load(text, str(file))


def dump(data) -> str:
    """Block-style YAML that keeps key order, for specs people review in pull requests."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)
