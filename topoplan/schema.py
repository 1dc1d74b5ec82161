"""A small declarative schema: one definition checks specs and catalogs and yields their JSON Schema.

A schema node checks a YAML value, appends a ``Problem`` for every fault (never stops at the first), and
returns the normalized value (defaults filled in). ``to_json_schema()`` gives the equivalent JSON Schema
for editors, so the validator and the schema cannot drift apart.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import Problem, did_you_mean
from .yamlio import LineMap, dotted

MISSING = object()
KEBAB = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


@dataclass
class Context:
    """Where values come from, and the problems found so far."""

    file: str
    lines: LineMap
    problems: list = field(default_factory=list)

    def error(self, path, message: str, hint: str = "") -> None:
        self.problems.append(Problem(self.file, self.lines.line_of(path), dotted(path), message, hint))


def _type_name(value) -> str:
    if value is None:
        return "nothing (null)"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "text",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


class Schema:
    doc: str = ""

    def check(self, value, path, ctx: Context):
        raise NotImplementedError

    def json(self) -> dict:
        raise NotImplementedError

    def to_json_schema(self) -> dict:
        out = self.json()
        if self.doc:
            out = {"description": self.doc, **out}
        return out


@dataclass
class Int(Schema):
    minimum: int | None = None
    maximum: int | None = None
    doc: str = ""
    max_hint: str = ""

    def check(self, value, path, ctx):
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                ctx.error(path, f"expected a whole number, got {_type_name(value)} ({value!r})",
                          "write a whole number without quotes or units, e.g. 1024")
                return MISSING
        if self.minimum is not None and value < self.minimum:
            what = "positive" if self.minimum == 1 else f"at least {self.minimum}"
            ctx.error(path, f"must be {what}, got {value}", f"use {self.minimum} or more")
            return MISSING
        if self.maximum is not None and value > self.maximum:
            ctx.error(path, f"{value:,} is more than the largest supported value {self.maximum:,}",
                      self.max_hint or f"use at most {self.maximum:,}")
            return MISSING
        return value

    def json(self):
        out: dict[str, Any] = {"type": "integer"}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out


@dataclass
class Num(Schema):
    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None
    doc: str = ""

    def check(self, value, path, ctx):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            hint = "write a number without quotes or units, e.g. 400"
            if isinstance(value, str) and re.fullmatch(r"\s*[0-9.]+[eE][0-9]+\s*", value):
                mantissa, _, exponent = value.strip().lower().partition("e")
                hint = f"YAML reads an exponent without a sign as text: write {mantissa}e+{exponent}"
            ctx.error(path, f"expected a number, got {_type_name(value)} ({value!r})", hint)
            return MISSING
        if self.exclusive_minimum is not None and value <= self.exclusive_minimum:
            ctx.error(path, f"must be greater than {self.exclusive_minimum:g}, got {value}", "use a positive number")
            return MISSING
        if self.minimum is not None and value < self.minimum:
            ctx.error(path, f"must be at least {self.minimum:g}, got {value}", f"use {self.minimum:g} or more")
            return MISSING
        if self.maximum is not None and value > self.maximum:
            ctx.error(path, f"must be at most {self.maximum:g}, got {value}", f"use {self.maximum:g} or less")
            return MISSING
        return value

    def json(self):
        out: dict[str, Any] = {"type": "number"}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.exclusive_minimum is not None:
            out["exclusiveMinimum"] = self.exclusive_minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out


@dataclass
class Bool(Schema):
    doc: str = ""

    def check(self, value, path, ctx):
        if not isinstance(value, bool):
            ctx.error(path, f"expected true or false, got {_type_name(value)} ({value!r})", "write true or false")
            return MISSING
        return value

    def json(self):
        return {"type": "boolean"}


MAX_ID_CHARS = 100        # ids and names end up in file names (charts, emitted specs)
MAX_TEXT_CHARS = 10_000   # descriptions and sources


def _shown(value: str, limit: int = 60) -> str:
    """A value echoed in an error, cut short: errors stay one readable line."""
    return value if len(value) <= limit else value[:limit] + f"... ({len(value):,} characters)"


@dataclass
class Str(Schema):
    kebab: bool = False
    doc: str = ""

    def check(self, value, path, ctx):
        if not isinstance(value, str):
            ctx.error(path, f"expected text, got {_type_name(value)} ({_shown(repr(value))})", "put the value in quotes")
            return MISSING
        limit = MAX_ID_CHARS if self.kebab else MAX_TEXT_CHARS
        if len(value) > limit:
            ctx.error(path, f"{len(value):,} characters, more than the {limit:,} allowed here", "shorten it")
            return MISSING
        if self.kebab and not KEBAB.match(value):
            suggestion = re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")
            ctx.error(path, f"'{_shown(value)}' is not kebab-case (lowercase letters, digits and dashes)",
                      f"use '{suggestion}'" if suggestion else "use lowercase letters, digits and dashes")
            return MISSING
        return value

    def json(self):
        out: dict[str, Any] = {"type": "string"}
        if self.kebab:
            out["pattern"] = KEBAB.pattern
        return out


@dataclass
class Enum(Schema):
    values: tuple = ()
    doc: str = ""

    def check(self, value, path, ctx):
        if isinstance(value, (list, dict)) or value not in self.values:
            ctx.error(path, f"unknown value {value!r}", did_you_mean(value, self.values))
            return MISSING
        return value

    def json(self):
        return {"enum": list(self.values)}


@dataclass
class Parsed(Schema):
    """A scalar read by a parser function (sizes, rates); the parser raises ValueError with the reason."""

    parser: Callable = str
    json_schema: dict = field(default_factory=dict)
    doc: str = ""
    hint: str = ""

    def check(self, value, path, ctx):
        try:
            return self.parser(value)
        except ValueError as err:
            ctx.error(path, str(err), self.hint)
            return MISSING

    def json(self):
        return dict(self.json_schema)


@dataclass
class List(Schema):
    item: Schema = None
    min_items: int = 0
    doc: str = ""

    def check(self, value, path, ctx):
        if not isinstance(value, list):
            ctx.error(path, f"expected a list, got {_type_name(value)}",
                      "start each item with '- ' on its own line, or write [a, b]")
            return MISSING
        if len(value) < self.min_items:
            ctx.error(path, f"needs at least {self.min_items} item(s)", "add an item")
        out = []
        for index, item in enumerate(value):
            checked = self.item.check(item, path + (index,), ctx)
            if checked is not MISSING:
                out.append(checked)
        return out

    def json(self):
        out = {"type": "array", "items": self.item.to_json_schema()}
        if self.min_items:
            out["minItems"] = self.min_items
        return out


@dataclass
class Key:
    schema: Schema
    required: bool = False
    default: Any = None


@dataclass
class Obj(Schema):
    """A mapping with known keys; unknown keys are errors with a did-you-mean hint."""

    keys: dict = field(default_factory=dict)
    doc: str = ""

    def check(self, value, path, ctx):
        if not isinstance(value, dict):
            ctx.error(path, f"expected a mapping (key: value lines), got {_type_name(value)}",
                      "write 'key: value' lines indented under this key" if path else "a spec starts with 'name:'")
            return MISSING
        out = {}
        for name in value:
            if name not in self.keys:
                ctx.error(path + (name,), f"unknown key '{name}'", did_you_mean(name, self.keys))
        for name, key in self.keys.items():
            if name in value:
                checked = key.schema.check(value[name], path + (name,), ctx)
                out[name] = checked
            elif key.required:
                ctx.error(path, f"missing required key '{name}'",
                          f"add '{name}: ...'" + (f" ({key.schema.doc})" if key.schema.doc else ""))
                out[name] = MISSING
            else:
                out[name] = key.default
        return out

    def json(self):
        props = {}
        for name, key in self.keys.items():
            props[name] = key.schema.to_json_schema()
        out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
        required = [name for name, key in self.keys.items() if key.required]
        if required:
            out["required"] = required
        return out


@dataclass
class Map(Schema):
    """A mapping whose keys come from a fixed set and whose values share one schema."""

    key_values: tuple = ()
    value: Schema = None
    doc: str = ""

    def check(self, value, path, ctx):
        if not isinstance(value, dict):
            ctx.error(path, f"expected a mapping, got {_type_name(value)}", "write 'key: value' lines indented under this key")
            return MISSING
        out = {}
        for name, item in value.items():
            if name not in self.key_values:
                ctx.error(path + (name,), f"unknown key '{name}'", did_you_mean(name, self.key_values))
                continue
            checked = self.value.check(item, path + (name,), ctx)
            if checked is not MISSING:
                out[name] = checked
        return out

    def json(self):
        return {"type": "object", "properties": {k: self.value.to_json_schema() for k in self.key_values},
                "additionalProperties": False}


@dataclass
class Dict(Schema):
    """A mapping from free-form kebab-case names (e.g. collective names) to values of one schema."""

    value: Schema = None
    doc: str = ""

    def check(self, value, path, ctx):
        if not isinstance(value, dict):
            ctx.error(path, f"expected a mapping, got {_type_name(value)}", "write 'key: value' lines indented under this key")
            return MISSING
        out = {}
        for name, item in value.items():
            checked = self.value.check(item, path + (name,), ctx)
            if checked is not MISSING:
                out[str(name)] = checked
        return out

    def json(self):
        return {"type": "object", "additionalProperties": self.value.to_json_schema()}


@dataclass
class OneOf(Schema):
    """A value that may take one of several shapes, told apart by its Python type (scalar, list or mapping)."""

    options: tuple = ()
    doc: str = ""

    def check(self, value, path, ctx):
        shape = "mapping" if isinstance(value, dict) else "list" if isinstance(value, list) else "scalar"
        for option in self.options:
            kind = "mapping" if isinstance(option, (Obj, Map, Dict)) else "list" if isinstance(option, List) else "scalar"
            if kind == shape:
                return option.check(value, path, ctx)
        return self.options[0].check(value, path, ctx)

    def json(self):
        return {"oneOf": [o.to_json_schema() for o in self.options]}


def has_missing(value) -> bool:
    """True when a checked value (or anything inside it) failed its check."""
    if value is MISSING:
        return True
    if isinstance(value, dict):
        return any(has_missing(v) for v in value.values())
    if isinstance(value, list):
        return any(has_missing(v) for v in value)
    return False
