"""The resumable cache of finished batches: one JSON-lines file per piece of work.

A generator that is given a folder appends every finished batch to ``<desc>-<fingerprint>.jsonl`` at once (one line
per sample: ``[prompt, sample, token_ids, truncated]``, flushed and fsynced), and the next call with the same
fingerprint (the same prompts, plan, seed, batch size, routes and steering) reads them back and samples only the
missing batches. A last line cut by a kill is ignored. Engineering choice.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
from collections.abc import Sequence
from typing import Any

Row = tuple[int, int, list[int], bool]
"""One cached sample: ``(prompt index, sample index, completion token ids, truncated)``."""


def fingerprint(key: Any) -> str:
    """16 hex digits of the SHA-256 of ``json.dumps(key, sort_keys=True)`` (``key`` must be JSON-able)."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


class BatchCache:
    """The partial file of one piece of work.

    Args:
        folder: where the file lives (created on the first append).
        desc: a label (the generator's progress-bar label); characters other than ``[A-Za-z0-9_.-]`` become ``_``.
        key: the JSON-able description of the work; its :func:`fingerprint` names the file.

    Attributes:
        path: ``folder / f"{desc}-{fingerprint(key)}.jsonl"``.
    """

    def __init__(self, folder: str | pathlib.Path, desc: str, key: Any):
        self.path = pathlib.Path(folder) / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', desc)}-{fingerprint(key)}.jsonl"

    def read(self) -> dict[tuple[int, int], Row]:
        """``{(prompt, sample): row}`` of the file (empty when there is none); unreadable lines are skipped."""
        done: dict[tuple[int, int], Row] = {}
        if not self.path.is_file():
            return done
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                p, s, ids, is_truncated = json.loads(line)
            except (json.JSONDecodeError, ValueError):
                continue
            done[(p, s)] = (p, s, ids, is_truncated)
        return done

    def append(self, rows: Sequence[Row]) -> None:
        """Append ``rows`` and make them durable (flush + fsync) before returning."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(list(row)) + "\n" for row in rows))
            f.flush()
            os.fsync(f.fileno())
