"""Reversible edits of Inductor's objects: each returns the callable that undoes it exactly."""

from __future__ import annotations

from collections.abc import Callable

_ABSENT = object()


def swap_entries(table: dict, entries: dict) -> Callable[[], None]:
    """Sets ``table[k] = v`` (``v is None`` deletes) and returns the exact undo."""
    saved = {k: table.get(k, _ABSENT) for k in entries}
    for key, value in entries.items():
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value

    def undo() -> None:
        for key, value in saved.items():
            if value is _ABSENT:
                table.pop(key, None)
            else:
                table[key] = value

    return undo


def replace_attribute(owner: object, name: str, value: object) -> Callable[[], None]:
    """``setattr(owner, name, value)`` and the exact undo (the attribute owner's own entry)."""
    saved = owner.__dict__.get(name, _ABSENT) if hasattr(owner, "__dict__") else _ABSENT
    setattr(owner, name, value)

    def undo() -> None:
        if saved is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, saved)

    return undo
