"""The keymap: every binding of the TUI by its id, and the ``[keys]`` remaps of config.toml
checked against them.

A binding's id (``jobs.open``, ``table.sort_next``) names it in ``[keys]``; the app hands the
checked remaps to ``App.set_keymap``, which Textual applies to every node's bindings. A
scope is one class's bindings (a screen, a widget, the app): two ids may not end on one key
in one scope, because Textual keeps one binding per key there. Bindings that share a key on
purpose (one of the two enabled at a time) share their id, and move together.

The engine only stores ``[keys]`` as text (engine/config.py); what an id or a key means is
known here. This module walks every screen and widget module: the app imports it only when
``[keys]`` has entries (the first frame does not wait for thirty modules), and the CLI only
inside ``nunet-tui keys``.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

from textual.binding import Binding
from textual.dom import DOMNode
from textual.keys import KEY_NAME_REPLACEMENTS, KEY_TO_UNICODE_NAME, Keys, _character_to_key

PACKAGES = ("nunet_tui.screens", "nunet_tui.widgets")
MODIFIERS = frozenset({"ctrl", "shift", "alt", "meta", "super", "hyper"})
KEYS_HINT = "`nunet-tui keys` lists the ids and their keys"


@dataclass(frozen=True)
class KeyEntry:
    """One id: its default key(s) (Textual's form, "e,enter"), what it does, and where."""

    id: str
    key: str
    description: str
    scopes: tuple[str, ...]


def _modules() -> list[str]:
    names = ["nunet_tui.app"]
    for package in PACKAGES:
        module = importlib.import_module(package)
        names += [info.name for info in pkgutil.iter_modules(module.__path__, prefix=f"{package}.")]
    return names


def _own_bindings(kind: type) -> list[object]:
    """The bindings the class and its nunet_tui bases declare (Textual merges them so)."""
    found: list[object] = []
    for base in reversed(kind.__mro__):
        if base.__module__.startswith("nunet_tui.") and "BINDINGS" in base.__dict__:
            found += list(base.__dict__["BINDINGS"])
    return found


@cache
def binding_scopes() -> dict[str, list[object]]:
    """Every nunet_tui class with bindings, by ``module.Class``: its bindings (``Binding``s;
    anything else is a binding without an id, which the tests refuse)."""
    scopes: dict[str, list[object]] = {}
    for name in _modules():
        module = importlib.import_module(name)
        for _, kind in inspect.getmembers(module, inspect.isclass):
            if kind.__module__ != name or not issubclass(kind, DOMNode):
                continue
            if bindings := _own_bindings(kind):
                scopes[f"{name}.{kind.__qualname__}"] = bindings
    return scopes


@cache
def catalog() -> dict[str, KeyEntry]:
    """Every binding id: its default key, its description (the tooltip, else the footer's
    word) and the scopes it is in, sorted by id."""
    found: dict[str, KeyEntry] = {}
    for scope, bindings in binding_scopes().items():
        for binding in bindings:
            if not isinstance(binding, Binding) or not binding.id:
                continue
            entry = found.get(binding.id)
            if entry is None:
                text = binding.tooltip or binding.description
                found[binding.id] = KeyEntry(binding.id, binding.key, text, (scope,))
            elif scope not in entry.scopes:
                found[binding.id] = KeyEntry(
                    entry.id, entry.key, entry.description, (*entry.scopes, scope)
                )
    return dict(sorted(found.items()))


@cache
def _known_names() -> frozenset[str]:
    names = {key.value.rpartition("+")[2] for key in Keys}
    return frozenset(names | set(KEY_NAME_REPLACEMENTS.values()) | set(KEY_TO_UNICODE_NAME))


def key_problem(keys: str) -> str | None:
    """Why Textual cannot read ``keys`` ("ctrl+o", "space", "e,enter"), or None."""
    for key in (part.strip() for part in keys.split(",")):
        if not key:
            return "an empty key (a stray comma?)"
        if len(key) == 1:
            continue
        *modifiers, name = key.split("+")
        if unknown := [m for m in modifiers if m not in MODIFIERS]:
            return f"{unknown[0]!r} in {key!r} is no modifier (ctrl, shift, alt, meta, super)"
        if len(name) == 1 or name in _known_names():
            continue
        try:
            unicodedata.lookup(name.replace("_", " ").upper())  # question_mark, dollar_sign
        except KeyError:
            return f"{key!r} is no key Textual knows (write e.g. space, ctrl+o, f5, a)"
    return None


def _normal(keys: str) -> list[str]:
    """Each key of ``keys`` as Textual binds it ("?" is "question_mark")."""
    return [
        _character_to_key(key) if len(key) == 1 else key
        for key in (part.strip() for part in keys.split(","))
    ]


def _clash(
    remaps: Mapping[str, str], scopes: Mapping[str, list[object]], ids: Iterable[str]
) -> tuple[str, str] | None:
    """Two ids on one key in one scope once ``remaps`` apply, one of them in ``ids``."""
    wanted = set(ids)
    for bindings in scopes.values():
        on_key: dict[str, str] = {}
        for binding in bindings:
            if not isinstance(binding, Binding) or not binding.id:
                continue
            keys = remaps.get(binding.id, binding.key)
            for key in _normal(keys):
                other = on_key.setdefault(key, binding.id)
                if other != binding.id and (other in wanted or binding.id in wanted):
                    return other, binding.id
    return None


def check_remaps(remaps: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The entries of ``[keys]`` that apply, and one line for each that does not (an unknown
    id, a key Textual cannot read, a key another binding of the same screen has): that one
    keeps its default key. Remaps are checked together, so two ids may swap keys."""
    known = catalog()
    good: dict[str, str] = {}
    problems: list[str] = []
    for binding_id, keys in remaps.items():
        if binding_id not in known:
            close = difflib.get_close_matches(binding_id, list(known), n=1)
            hint = f'did you mean "{close[0]}"? ' if close else ""
            problems.append(f'[keys] "{binding_id}": no such binding; {hint}({KEYS_HINT})')
        elif problem := key_problem(keys):
            problems.append(f'[keys] "{binding_id}" = "{keys}": {problem}; kept its default key')
        else:
            good[binding_id] = keys
    scopes = binding_scopes()
    while clash := _clash(good, scopes, good):
        # The later of two remaps gives way (or the one remap, against a default key).
        loser, other = (clash[1], clash[0]) if clash[1] in good else clash
        problems.append(
            f'[keys] "{loser}" = "{good.pop(loser)}" takes the key of "{other}" on the same '
            "screen; kept its default key (move one of them elsewhere)"
        )
    return good, problems


def key_rows(remaps: Mapping[str, str]) -> list[tuple[str, str, str, str]]:
    """(id, key as mapped now, default key, description) for every id: ``nunet-tui keys``."""
    return [
        (entry.id, remaps.get(entry.id, entry.key), entry.key, entry.description)
        for entry in catalog().values()
    ]
