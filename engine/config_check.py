"""Settings checked against their schema, and a bad one told in one line.

The ranges live in the msgspec schema (engine/config.py: ``Annotated[float, Meta(gt=0, ...)]``);
this module reads them back through ``msgspec.inspect`` to parse ``NUNET_*`` values into the
field's type and to turn a ``ValidationError`` into ``network.heartbeat_interval_s = 0 (in
config.toml): it must be a number from 0.1 to 3600``: the field, the value, where it was set
and what is allowed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import msgspec
import msgspec.inspect as mi

from engine.domain.safe_text import safe

# Deeper than any settings table ever is; deeper still is a typo or an attack.
MAX_DEPTH = 16
_AT = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_PART = re.compile(r"\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)|\[(?P<index>[^\]]*)\]")
_TRUE = ("1", "true", "yes", "on")
# A place in the settings: field names, list indexes, None for a table entry msgspec leaves
# unnamed.
Path_ = list[str | int | None]
_FALSE = ("0", "false", "no", "off")


def _bare(kind: mi.Type) -> mi.Type:
    """The type under ``Annotated`` metadata and ``| None``."""
    while True:
        if isinstance(kind, mi.Metadata):
            kind = kind.type
        elif isinstance(kind, mi.UnionType):
            others = [t for t in kind.types if not isinstance(t, mi.NoneType)]
            if len(others) != 1:
                return kind
            kind = others[0]
        else:
            return kind


def _note(kind: mi.Type) -> str:
    """The ``Meta(description=...)`` on ``kind``, under ``| None`` too."""
    while True:
        if isinstance(kind, mi.Metadata):
            return str((kind.extra_json_schema or {}).get("description", "")) or _note(kind.type)
        if not isinstance(kind, mi.UnionType):
            return ""
        others = [t for t in kind.types if not isinstance(t, mi.NoneType)]
        if len(others) != 1:
            return ""
        kind = others[0]


def _optional(kind: mi.Type) -> bool:
    while isinstance(kind, mi.Metadata):
        kind = kind.type
    return isinstance(kind, mi.UnionType) and any(isinstance(t, mi.NoneType) for t in kind.types)


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _bounds(kind: mi.IntType | mi.FloatType) -> str:
    if kind.ge is not None and kind.le is not None:
        return f" from {_number(kind.ge)} to {_number(kind.le)}"
    words = [
        f"{word} {_number(bound)}"
        for word, bound in (
            ("at least", kind.ge),
            ("above", kind.gt),
            ("at most", kind.le),
            ("below", kind.lt),
        )
        if bound is not None
    ]
    return (" " + " and ".join(words)) if words else ""


def describe(kind: mi.Type) -> str:
    """What a value of ``kind`` may be, in words: ``a whole number from 1 to 1,024``."""
    note = _note(kind)
    bare = _bare(kind)
    if isinstance(bare, mi.IntType):
        text = "a whole number" + _bounds(bare)
    elif isinstance(bare, mi.FloatType):
        text = "a number" + _bounds(bare)
    elif isinstance(bare, mi.BoolType):
        text = "true or false"
    elif isinstance(bare, mi.LiteralType):
        text = "one of " + ", ".join(repr(v) for v in bare.values)
    elif isinstance(bare, mi.StrType):
        size = []
        if bare.min_length:
            size.append(f"at least {bare.min_length}")
        if bare.max_length is not None:
            size.append(f"at most {bare.max_length:,}")
        text = "text" + (f" of {' and '.join(size)} characters" if size else "")
    elif isinstance(bare, mi.ListType):
        most = f"at most {bare.max_length:,} " if bare.max_length is not None else ""
        text = f"a list of {most}items, each {describe(bare.item_type)}"
    elif isinstance(bare, mi.DictType):
        most = f"at most {bare.max_length:,} " if bare.max_length is not None else ""
        text = f"a table of {most}entries, each {describe(bare.value_type)}"
    elif isinstance(bare, mi.StructType):
        text = "a table of settings"
    else:
        text = "a valid value"
    if note:
        text += f" ({note})"
    if _optional(kind):
        text += ", or left out"
    return text


def _fields(struct: mi.StructType) -> dict[str, mi.Type]:
    return {f.name: f.type for f in struct.fields}


def sections(
    root: type[msgspec.Struct],
) -> tuple[dict[str, mi.Type], dict[str, dict[str, mi.Type]]]:
    """The top-level fields and, per section ([network], ...), its fields."""
    info = mi.type_info(root)
    assert isinstance(info, mi.StructType)
    top: dict[str, mi.Type] = {}
    tables: dict[str, dict[str, mi.Type]] = {}
    for name, kind in _fields(info).items():
        bare = _bare(kind)
        if isinstance(bare, mi.StructType):
            tables[name] = _fields(bare)
        else:
            top[name] = kind
    return top, tables


def env_value(kind: mi.Type, text: str) -> Any:
    """A ``NUNET_*`` string as the field's type wants it (lists and tables: commas); a string
    that does not parse is passed on as it is, for the schema to refuse with the field name."""
    bare = _bare(kind)
    if _optional(kind) and not text.strip():
        return None
    if isinstance(bare, mi.ListType):
        return [env_value(bare.item_type, item.strip()) for item in text.split(",") if item.strip()]
    if isinstance(bare, mi.DictType):
        table: dict[str, Any] = {}
        for item in text.split(","):
            key, sep, value = item.partition("=")
            if not sep:
                return text
            table[key.strip()] = env_value(bare.value_type, value.strip())
        return table
    if isinstance(bare, mi.BoolType):
        word = text.strip().lower()
        return True if word in _TRUE else False if word in _FALSE else text
    if isinstance(bare, mi.IntType):
        try:
            return int(text.strip())
        except ValueError:
            return text
    if isinstance(bare, mi.FloatType):
        try:
            return float(text.strip())
        except ValueError:
            return text
    return text


def _shown(value: Any) -> str:
    text = repr(value)
    return safe(text if len(text) <= 60 else text[:57] + "...")


def _lookup(raw: Any, parts: list[str | int]) -> tuple[bool, Any]:
    for part in parts:
        in_list = isinstance(part, int) and isinstance(raw, list) and 0 <= part < len(raw)
        if not (in_list or (isinstance(raw, dict) and part in raw)):
            return False, None
        raw = raw[part]
    return True, raw


def _kind_at(root: type[msgspec.Struct], parts: Path_) -> mi.Type | None:
    kind: mi.Type = mi.type_info(root)
    for part in parts:
        bare = _bare(kind)
        if isinstance(bare, mi.StructType) and isinstance(part, str):
            found = _fields(bare).get(part)
            if found is None:
                return None
            kind = found
        elif isinstance(bare, mi.ListType):
            kind = bare.item_type
        elif isinstance(bare, mi.DictType):
            kind = bare.value_type
        else:
            return None
    return kind


def _dotted(parts: Path_) -> str:
    text = ""
    for part in parts:
        if isinstance(part, str):
            text += ("." if text else "") + part
        else:
            text += f"[{'' if part is None else part}]"
    return text


def _source(parts: Path_, where: dict[str, str], file_label: str) -> str:
    top = ".".join(p for p in parts[:2] if isinstance(p, str))
    return f"from {where[top]}" if top in where else f"in {file_label}"


def explain(
    exc: msgspec.ValidationError,
    root: type[msgspec.Struct],
    raw: Mapping[str, Any],
    where: dict[str, str],
    file_label: str,
) -> str:
    """One line for a settings ``ValidationError``. ``where`` maps ``section.field`` to the
    ``NUNET_*`` variable that set it; anything else came from ``file_label``."""
    message = str(exc)
    match = _AT.search(message)
    reason = message[: match.start()] if match else message
    parts: Path_ = []
    for piece in _PART.finditer(match.group("path") if match else ""):
        if piece.group("name"):
            parts.append(piece.group("name"))
        else:
            index = piece.group("index")
            parts.append(int(index) if index.lstrip("-").isdigit() else None)
    if unknown := re.match(r"Object contains unknown field `(?P<name>[^`]*)`", reason):
        section = _kind_at(root, parts)
        bare = _bare(section) if section is not None else None
        known = ", ".join(_fields(bare)) if isinstance(bare, mi.StructType) else ""
        name = _dotted([*parts, unknown.group("name")])
        return f"unknown setting {safe(name)} in {file_label}" + (
            f"; the settings there are {known}" if known else ""
        )
    source = _source(parts, where, file_label)
    kind = _kind_at(root, parts)
    rule = describe(kind) if kind is not None else reason
    if None in parts:  # msgspec does not say which entry of a table: name the table
        parts = parts[: parts.index(None)]
        rule = f"a table whose every entry is {rule}"
    found, value = _lookup(raw, [p for p in parts if p is not None])
    shown = f" = {_shown(value)}" if found else ""
    return f"bad setting {safe(_dotted(parts))}{shown} ({source}): it must be {rule}"


def raw_problem(
    root: type[msgspec.Struct], raw: Any, where: dict[str, str], file_label: str
) -> str | None:
    """What msgspec would let through in parsed TOML: a NaN or infinite number (the schema
    bounds every float, but one missing bound would let ``nan`` in), or nesting deeper than
    any settings table (walked without recursion). One line, or None."""
    stack: list[tuple[Path_, Any]] = [([], raw)]
    while stack:
        parts, value = stack.pop()
        if len(parts) > MAX_DEPTH:
            return f"{file_label} is nested too deeply to be settings; fix or remove it"
        if isinstance(value, float) and not math.isfinite(value):
            kind = _kind_at(root, parts)
            rule = describe(kind) if kind is not None else "a finite number"
            source = _source(parts, where, file_label)
            return f"bad setting {safe(_dotted(parts))} = {value} ({source}): it must be {rule}"
        if isinstance(value, dict):
            stack.extend(([*parts, str(k)], v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend(([*parts, i], v) for i, v in enumerate(value))
    return None
