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


def load(text: str, filename: str):
    """Parse one YAML document safely; raise ``SpecError`` for syntax errors and duplicate keys."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
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
    data = _build(root, (), lines, problems, filename, loader)
    if problems:
        raise SpecError(problems)
    return data, lines


_PLAIN_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:omap")


def _build(node, path, lines, problems, filename, loader):
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _PLAIN_TAGS:
        problems.append(Problem(filename, node.start_mark.line + 1, dotted(path),
                                f"unsupported YAML tag '{node.tag}'", "remove the '!!' tag; specs are plain data"))
        return None
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # YAML merge keys (<<)
        out = {}
        for key_node, value_node in node.value:
            key = _build(key_node, path, lines, problems, filename, loader)
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
            out[key] = _build(value_node, child, lines, problems, filename, loader)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            child = path + (index,)
            lines[child] = item.start_mark.line + 1
            items.append(_build(item, child, lines, problems, filename, loader))
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
        with open(file, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError([Problem(str(file), 0, "", f"cannot read file: {err}",
                                 "check the path and that the file is UTF-8 text")]) from None
    return load(text, str(file))


def dump(data) -> str:
    """Block-style YAML that keeps key order, for specs people review in pull requests."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)
