"""Registries of named choices: one place per option that lists the names, validates a value and maps it to code.

Each option that takes one of a few names (bank controls, routes, long-text modes, grader modes, replacement rules,
embedder precisions) has one :class:`Registry` in the module that implements the choices; configs validate with it
and code asks it for the entry instead of comparing strings::

    BANK_CONTROLS = Registry("bank_control")
    BANK_CONTROLS.register("none", BankControl(...), help="the method itself")
    BANK_CONTROLS.check("reversed")           # -> "reversed", or ValueError naming the option and the valid names
    BANK_CONTROLS["unstructured_random"]      # -> the entry registered under that name

Importing a registry pulls in nothing heavy (configs import them at parse time).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_NAME = object()  # register(name) without an entry: the entry is the name


class Registry:
    """The names an option accepts, each with its entry (any object) and a one-line help.

    Args:
        option: the option's name, as users set it (``"bank_control"``); error messages name it.
        kind: what a value is, for error messages (default ``"valid <option>"``).

    Raises:
        ValueError: (``register``) a name registered twice; (``check`` / ``[]``) an unknown name, listing the valid
            ones.
    """

    def __init__(self, option: str, kind: str | None = None):
        self.option = option
        self.kind = kind or f"valid {option}"
        self._entries: dict[str, Any] = {}
        self._help: dict[str, str] = {}

    def register(self, name: str, entry: Any = _NAME, help: str = "") -> Any:
        """Register ``entry`` under ``name`` (``entry`` defaults to ``name``; None is an entry) and return the
        entry."""
        if name in self._entries:
            raise ValueError(f"{self.option}: {name!r} is registered twice")
        self._entries[name] = name if entry is _NAME else entry
        self._help[name] = help
        return self._entries[name]

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order (the first is the default where the option has one)."""
        return tuple(self._entries)

    def check(self, name: str, option: str | None = None) -> str:
        """``name`` if registered, else ValueError naming ``option`` (default: the registry's) and the valid names."""
        if not isinstance(name, str) or name not in self._entries:
            import difflib

            close = difflib.get_close_matches(str(name), list(self._entries), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{option or self.option}={name!r} is not a {self.kind}; valid: {', '.join(self)}{hint}")
        return name

    def help(self, name: str) -> str:
        return self._help[self.check(name)]

    def describe(self) -> str:
        """``"'a' (help a), 'b' (help b)"``: for ``--help`` texts and docs."""
        return ", ".join(f"{name!r}" + (f" ({self._help[name]})" if self._help[name] else "") for name in self)

    def __getitem__(self, name: str) -> Any:
        return self._entries[self.check(name)]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.option!r}: {', '.join(self)})"
