"""What an offline build computes and other builds can reuse, cached on disk: teacher verdicts and token lengths.

Grading is the slow part of an offline build (CHAMP: 12,062 solutions, about 2-4 minutes on two cores), then
tokenising them and reading the gold answers; the other settings of a build (length limit, prompt preset, split, CHAMP
settings) change none of these. So the builder asks this cache first and computes only what it lacks: a second
build with other settings takes seconds.

* :class:`VerdictCache`: per (solution text, gold answer, grader mode, grader version), the verdict; and per (gold,
  grader version) whether the gold can be read. File ``verdicts-<mode>-<version>.json``.
* :class:`TokenLengthCache`: per (text, tokenizer), the length in tokens. File ``lengths-<tokenizer hash>.json``.

Each file is ``{"format": 1, <what it is for>, "entries": {key: value}}``; keys are 32 hex digits of SHA-256 over the
texts. :func:`grader_version` hashes the grader's code, :data:`~trl_explore.rewards.modes.GRADER_VERSION` and the
versions of math-verify and its LaTeX parser, so a change of any of them starts a new file (old files stay; delete
the folder to reclaim them).

Concurrency: files are replaced atomically (a temporary file, then ``os.replace``), so a reader sees a whole file or
none; writers merge what is on disk with their own entries under an exclusive ``fcntl`` lock on ``<file>.lock`` (on
systems without ``fcntl`` the merge is unlocked: two simultaneous builders may then drop each other's newest entries,
which are computed again next time, never wrong). A file that does not parse or does not have this layout is ignored
with a one-line warning and rewritten at the next save.

Only verdicts are cached. A solution whose grading ran past the grader's timeout has none (the time depends on the
machine's load, not on the solution alone): it is not cached, and the builder retries it with a longer budget
(:func:`~trl_explore.data.filters.judge_completions`); nor is one whose worker failed. A ``"timeout"`` entry that an
earlier version wrote is read as not cached, so it is graded again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.metadata
import json
import logging
import os
import pathlib
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from trl_explore.rewards.modes import GRADER_VERSION, check_grader_mode

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

logger = logging.getLogger(__name__)

FORMAT = 1
"""Layout version of the cache files."""
TIMEOUT = "timeout"
"""What earlier versions stored for a solution graded past the timeout; read back as not cached, never written."""
_GRADER_MODULES = ("trl_explore.rewards.grading", "trl_explore.rewards.answers", "trl_explore.rewards.comparison",
                   "trl_explore.rewards.guards", "trl_explore.rewards.ascii_math", "trl_explore.rewards.gold_text",
                   "trl_explore.rewards.modes", "trl_explore.data.champ_answers")  # fmt: skip


def default_folder() -> pathlib.Path:
    """``cache_dir() / "offline" / "build_cache"``: where :func:`~trl_explore.data.load_default_offline_dataset` and
    the build script keep what builds share (``$TRL_EXPLORE_CACHE`` moves it, :func:`~trl_explore.defaults.cache_dir`).
    """
    from trl_explore.defaults import cache_dir

    return cache_dir() / "offline" / "build_cache"


@functools.lru_cache(maxsize=1)
def grader_version() -> str:
    """16 hex digits naming the grader's verdicts: a hash of :data:`GRADER_VERSION`, the source of the grader's modules
    (``trl_explore.rewards``: grading, answers, comparison, guards, ascii_math, gold_text, modes;
    ``trl_explore.data.champ_answers``, the plain-text gold reader) and the installed math-verify and
    latex2sympy2_extended versions."""
    digest = hashlib.sha256(GRADER_VERSION.encode())
    for name in _GRADER_MODULES:
        digest.update(pathlib.Path(importlib.import_module(name).__file__).read_bytes())
    for package in ("math-verify", "latex2sympy2_extended"):
        try:
            digest.update(f"{package}=={importlib.metadata.version(package)}".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{package} missing".encode())
    return digest.hexdigest()[:16]


def tokenizer_fingerprint(tokenizer) -> str:
    """16 hex digits naming what a tokenizer does: a hash of its full definition (``tokenizer.json`` of a fast
    tokenizer), else of its class, vocabulary and special tokens."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        definition = backend.to_str()
    else:
        definition = json.dumps([type(tokenizer).__name__, sorted(tokenizer.get_vocab().items()),
                                 sorted(map(str, getattr(tokenizer, "all_special_tokens", [])))])  # fmt: skip
    return hashlib.sha256(definition.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]


def text_key(*texts: str) -> str:
    """The cache key of one or more texts: 32 hex digits of SHA-256 over them."""
    blob = json.dumps(list(texts), ensure_ascii=False).encode("utf-8", errors="surrogatepass")
    return hashlib.sha256(blob).hexdigest()[:32]


class _KeyedFile:
    """``{key: value}`` in one JSON file: read once, merged and replaced atomically under a lock at each save."""

    def __init__(self, path: pathlib.Path, header: dict, valid: Callable[[Any], bool]) -> None:
        self.path, self.header, self.valid = path, header, valid
        self.entries: dict[str, Any] = self._read()
        self._pending: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        return self.entries.get(key)

    def put(self, key: str, value: Any) -> None:
        self.entries[key] = self._pending[key] = value

    def save(self) -> None:
        if not self._pending:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            merged = self._read(quiet=True)
            merged.update(self._pending)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump({"format": FORMAT, **self.header, "entries": merged}, handle, separators=(",", ":"))
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        self.entries.update(merged)
        self._pending.clear()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if fcntl is None:  # pragma: no cover - Windows
            yield
            return
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self, quiet: bool = False) -> dict[str, Any]:
        """The entries on disk ({} if there is no file, or a corrupt one: warned once unless ``quiet``)."""
        try:
            blob = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            return self._corrupt(f"{type(err).__name__}: {err}", quiet)
        expected = {"format": FORMAT, **self.header}
        if not (isinstance(blob, dict) and isinstance(blob.get("entries"), dict)
                and all(blob.get(k) == v for k, v in expected.items())):  # fmt: skip
            return self._corrupt(f"not a cache file with {expected}", quiet)
        if not all(isinstance(k, str) and self.valid(v) for k, v in blob["entries"].items()):
            return self._corrupt("an entry of the wrong type", quiet)
        return blob["entries"]

    def _corrupt(self, why: str, quiet: bool) -> dict:
        if not quiet:
            logger.warning("Ignoring the corrupt build cache file %s (%s); it is rewritten at the next save.",
                           self.path, why)  # fmt: skip
        return {}


class VerdictCache:
    """Cached teacher verdicts (and gold readability) of one grader mode under the current grader version.

    Args:
        folder: the cache folder (created at the first save).
        grader_mode: the grader mode (one of :data:`~trl_explore.rewards.modes.MODES`).
        gold_normalizer: the data set's phrasing rules the golds were read with, by name
            (:data:`~trl_explore.data.gold_normalizers.GOLD_NORMALIZERS`; default ``"none"``): part of the file name.

    Raises:
        ValueError: an unknown grader mode or gold normaliser.
    """

    def __init__(self, folder: str | os.PathLike, grader_mode: str, gold_normalizer: str = "none") -> None:
        from trl_explore.data.gold_normalizers import GOLD_NORMALIZERS

        self.grader_mode = check_grader_mode(grader_mode)
        self.gold_normalizer = GOLD_NORMALIZERS.check(gold_normalizer)
        self.version = grader_version()
        suffix = "" if gold_normalizer == "none" else f"-{gold_normalizer}"
        self.path = pathlib.Path(folder) / f"verdicts-{grader_mode}{suffix}-{self.version}.json"
        header = {"grader_mode": grader_mode, "gold_normalizer": gold_normalizer, "grader_version": self.version}
        self._file = _KeyedFile(self.path, header, lambda v: v in (0, 1, TIMEOUT) and not isinstance(v, bool))

    def __len__(self) -> int:
        return len(self._file.entries)

    def lookup(self, pairs: Sequence[tuple[str, str]]) -> list[bool | None]:
        """The cached verdict of each ``(solution, gold)`` pair, None where not cached (or an old cached timeout)."""
        found = (self._file.get(text_key(text, gold)) for text, gold in pairs)
        return [None if value is None or value == TIMEOUT else value == 1 for value in found]

    def add(self, pairs: Sequence[tuple[str, str]], outcomes: Sequence[bool | str | None]) -> None:
        """Remember verdicts (True/False); anything else (None, ``"timeout"``, ``"error"``) is not a verdict and is
        not cached. :meth:`save` writes them."""
        for (text, gold), outcome in zip(pairs, outcomes, strict=True):
            if isinstance(outcome, bool):
                self._file.put(text_key(text, gold), int(outcome))

    def lookup_golds(self, golds: Sequence[str]) -> list[bool | None]:
        """Whether each gold answer can be read (cached), None where not cached."""
        found = (self._file.get(text_key("gold", gold)) for gold in golds)
        return [None if value is None else value == 1 for value in found]

    def add_golds(self, golds: Sequence[str], parseable: Sequence[bool]) -> None:
        """Remember whether gold answers can be read; :meth:`save` writes them."""
        for gold, ok in zip(golds, parseable, strict=True):
            self._file.put(text_key("gold", gold), int(bool(ok)))

    def save(self) -> None:
        """Merge what was added since the last save into the file, atomically, under the file's lock."""
        self._file.save()


class TokenLengthCache:
    """Cached lengths of texts in tokens of one tokenizer (``add_special_tokens=False``).

    Args:
        folder: the cache folder (created at the first save).
        tokenizer: the tokenizer (identified by :func:`tokenizer_fingerprint`).
    """

    def __init__(self, folder: str | os.PathLike, tokenizer) -> None:
        fingerprint = tokenizer_fingerprint(tokenizer)
        self.path = pathlib.Path(folder) / f"lengths-{fingerprint}.json"
        valid = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0  # noqa: E731
        self._file = _KeyedFile(self.path, {"tokenizer": fingerprint}, valid)

    def lookup(self, texts: Iterable[str]) -> list[int | None]:
        """The cached length of each text, None where not cached."""
        return [self._file.get(text_key(text)) for text in texts]

    def add(self, texts: Sequence[str], lengths: Sequence[int]) -> None:
        for text, length in zip(texts, lengths, strict=True):
            self._file.put(text_key(text), int(length))

    def save(self) -> None:
        self._file.save()
