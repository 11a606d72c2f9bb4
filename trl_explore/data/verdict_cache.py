"""Teacher verdicts cached on disk per (solution text, gold answer, grader mode, grader version).

Grading is the slow part of an offline build (CHAMP: 12,062 solutions, about 2-4 minutes on two cores); the other
settings of a build (length limit, prompt preset, split, CHAMP settings) never change a verdict. So the builder asks
this cache first and grades only what it does not hold: a second build with other settings takes seconds.

One JSON file per grader mode and version, ``<folder>/verdicts-<mode>-<version>.json``:
``{"format": 1, "grader_mode": ..., "grader_version": ..., "verdicts": {key: 1 | 0 | "timeout"}}`` where ``key`` is
the SHA-256 of the solution text and the gold answer (128 bits, hex). :func:`grader_version` hashes the grader's
code, :data:`~trl_explore.rewards.modes.GRADER_VERSION` and the versions of math-verify and its LaTeX parser, so a
change of any of them starts a new file (old files are left in place; delete the folder to reclaim them).

Concurrency: files are replaced atomically (a temporary file, then ``os.replace``), so a reader sees a whole file or
none; writers merge what is on disk with their own verdicts under an exclusive ``fcntl`` lock on ``<file>.lock``
(on systems without ``fcntl`` the merge is unlocked: two simultaneous builders may then drop each other's newest
verdicts, which are graded again next time, never wrong). A file that does not parse or does not have this layout is
ignored with a one-line warning and rewritten at the next save.

A solution whose grading ran past the grader's timeout is cached as ``"timeout"`` and read back as not verified, as
the first build judged it (delete the file to grade those again); one whose worker failed is not cached.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import pathlib
import tempfile
from collections.abc import Iterator, Sequence

from trl_explore.rewards.modes import GRADER_VERSION, check_grader_mode

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

logger = logging.getLogger(__name__)

FORMAT = 1
"""Layout version of the cache files."""
TIMEOUT = "timeout"
"""What the cache stores for a solution graded past the timeout (read back as not verified)."""
_GRADER_MODULES = ("grading", "guards", "ascii_math", "modes")


def default_folder() -> pathlib.Path:
    """``cache_dir() / "offline" / "verdicts"``: where :func:`~trl_explore.data.load_default_offline_dataset` and the
    build script keep teacher verdicts (``$TRL_EXPLORE_CACHE`` moves it: :func:`trl_explore.defaults.cache_dir`)."""
    from trl_explore.defaults import cache_dir

    return cache_dir() / "offline" / "verdicts"


@functools.lru_cache(maxsize=1)
def grader_version() -> str:
    """16 hex digits naming the grader's verdicts: a hash of :data:`GRADER_VERSION`, the source of the grader's modules
    (``trl_explore.rewards``: grading, guards, ascii_math, modes; ``trl_explore.data.champ_answers``, the plain-text
    gold reader) and the installed math-verify and latex2sympy2_extended versions."""
    import importlib

    modules = [importlib.import_module(f"trl_explore.rewards.{name}") for name in _GRADER_MODULES]
    modules.append(importlib.import_module("trl_explore.data.champ_answers"))
    digest = hashlib.sha256(GRADER_VERSION.encode())
    for module in modules:
        digest.update(pathlib.Path(module.__file__).read_bytes())
    for package in ("math-verify", "latex2sympy2_extended"):
        try:
            digest.update(f"{package}=={importlib.metadata.version(package)}".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{package} missing".encode())
    return digest.hexdigest()[:16]


def verdict_key(text: str, gold: str) -> str:
    """The cache key of one (solution, gold) pair: 32 hex digits of SHA-256 over both texts."""
    blob = json.dumps([text, gold], ensure_ascii=False).encode("utf-8", errors="surrogatepass")
    return hashlib.sha256(blob).hexdigest()[:32]


class VerdictCache:
    """The cached verdicts of one grader mode under the current grader version.

    Args:
        folder: the cache folder (created at the first save).
        grader_mode: the grader mode (one of :data:`~trl_explore.rewards.modes.MODES`).

    Raises:
        ValueError: an unknown grader mode.
    """

    def __init__(self, folder: str | os.PathLike, grader_mode: str) -> None:
        self.grader_mode = check_grader_mode(grader_mode)
        self.folder = pathlib.Path(folder)
        self.version = grader_version()
        self.path = self.folder / f"verdicts-{grader_mode}-{self.version}.json"
        self._verdicts: dict[str, int | str] = self._read()
        self._pending: dict[str, int | str] = {}

    def __len__(self) -> int:
        return len(self._verdicts)

    def lookup(self, pairs: Sequence[tuple[str, str]]) -> list[bool | None]:
        """The cached verdict of each ``(solution, gold)`` pair (a cached timeout is False), None where not cached."""
        found = (self._verdicts.get(verdict_key(text, gold)) for text, gold in pairs)
        return [None if value is None else value == 1 for value in found]

    def add(self, pairs: Sequence[tuple[str, str]], outcomes: Sequence[bool | str | None]) -> None:
        """Remember verdicts (True/False, :data:`TIMEOUT`, or None: not cached); :meth:`save` writes them."""
        for (text, gold), outcome in zip(pairs, outcomes, strict=True):
            if outcome is None:
                continue
            value = TIMEOUT if outcome == TIMEOUT else int(bool(outcome))
            key = verdict_key(text, gold)
            self._verdicts[key] = self._pending[key] = value

    def save(self) -> None:
        """Merge the verdicts added since the last save into the file, atomically, under the folder's lock."""
        if not self._pending:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        with self._locked():
            merged = self._read(quiet=True)
            merged.update(self._pending)
            blob = {"format": FORMAT, "grader_mode": self.grader_mode, "grader_version": self.version,
                    "verdicts": merged}  # fmt: skip
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.folder)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(blob, handle, separators=(",", ":"))
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        self._verdicts.update(merged)
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

    def _read(self, quiet: bool = False) -> dict[str, int | str]:
        """The verdicts on disk ({} if there is no file, or a corrupt one: warned once unless ``quiet``)."""
        try:
            blob = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            return self._corrupt(f"{type(err).__name__}: {err}", quiet)
        if not (isinstance(blob, dict) and blob.get("format") == FORMAT and isinstance(blob.get("verdicts"), dict)
                and blob.get("grader_mode") == self.grader_mode and blob.get("grader_version") == self.version):
            return self._corrupt("not a verdict cache of this format, grader mode and version", quiet)
        verdicts = blob["verdicts"]
        if not all(isinstance(k, str) and v in (0, 1, TIMEOUT) for k, v in verdicts.items()):
            return self._corrupt("a verdict that is not 0, 1 or 'timeout'", quiet)
        return verdicts

    def _corrupt(self, why: str, quiet: bool) -> dict:
        if not quiet:
            logger.warning("Ignoring the corrupt teacher-verdict cache %s (%s); it is rewritten at the next save.",
                           self.path, why)  # fmt: skip
        return {}
