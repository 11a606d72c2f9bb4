"""Writing a run's files safely: a write the disk refused, read as one line, and one writer per output folder.

Split from :mod:`trl_explore.checkpoints` (which re-exports these names): :func:`describe_write_failure` names the
folder, the file, the cause and the free space of a refused write whatever the writer's wording (safetensors, torch,
JSON); :class:`OutputDirLock` is the lock a training run holds on its ``output_dir``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (no space, no permission): the message names the folder, the file and the
    free space."""


_TORCH_WRITE_FAILURES = ("inline_container", "file write failed", "unexpected pos")


_ERRNO_PATTERNS = (r"\bcode: (\d+)", r"\(os error (\d+)\)", r"\[Errno (\d+)\]")
"""How writers spell the OS error in their message: safetensors before 0.8 (``IoError(Os { code: 28, kind:
StorageFull ... })``), Rust's ``io::Error`` as safetensors 0.8 prints it (``No space left on device (os error 28)``),
Python's ``OSError`` text (``[Errno 28] No space left on device``) wrapped by another library."""

_DISK_REFUSALS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EFBIG, errno.EIO)
"""The OS errors of a disk refusing a write."""


def _causes(err: BaseException):
    """``err`` and the exceptions it was raised from or while handling (``__cause__`` / ``__context__``)."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def _errno_of(err: BaseException) -> int | None:
    """The OS error number behind ``err``, whatever the writer's wording: an ``OSError``'s ``errno``, a number in the
    message (:data:`_ERRNO_PATTERNS`), or the OS's own text for one of :data:`_DISK_REFUSALS` (``"No space left on
    device"``); searched along the exception's causes."""
    for e in _causes(err):
        if isinstance(e, OSError) and e.errno:
            return e.errno
        text = str(e)
        for pattern in _ERRNO_PATTERNS:
            match = re.search(pattern, text)
            if match:
                return int(match.group(1))
        lowered = text.lower()
        for code in _DISK_REFUSALS:
            if os.strerror(code).lower() in lowered:
                return code
    return None


def is_write_failure(err: BaseException) -> bool:
    """Whether ``err`` (raised while saving a checkpoint) is the disk refusing a write, whatever the writer and its
    wording: an ``OSError`` (Python's ``open``/``write``, ``json.dump``), torch's zip writer failing (``RuntimeError:
    [enforce fail at inline_container.cc:...] unexpected pos``, what a full disk looks like through ``torch.save``),
    or any error whose message or cause carries a disk refusal (:func:`_errno_of`: safetensors' ``IoError(Os { code:
    28 ...})`` and its 0.8 wording ``No space left on device (os error 28)``)."""
    text = str(err)
    torch_zip = isinstance(err, RuntimeError) and any(s in text for s in _TORCH_WRITE_FAILURES)
    return isinstance(err, OSError) or torch_zip or _errno_of(err) in _DISK_REFUSALS


def _free_space(folder: str) -> str:
    path = os.path.abspath(folder)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return "unknown free space"
    return f"{free / 2**30:.2f} GiB free" if free >= 2**30 else f"{free / 2**20:.1f} MiB free"


def _newest_file(folder: str) -> str | None:
    """The file under ``folder`` written last, as far as modification times tell (None: no file)."""
    found = [(os.stat(os.path.join(root, name)).st_mtime_ns, os.path.join(root, name))
             for root, _, names in os.walk(folder) for name in names]
    return max(found)[1] if found else None


def describe_write_failure(folder: str, err: BaseException) -> str:
    """One line for a checkpoint save that ``err`` stopped: the folder, the file being written (the error's file
    name, else the newest file in the folder), why (no space, no permission, a read-only file system, or the error's
    own words) and the free space of the disk.

    Example: ``"cannot save checkpoint out/checkpoint-3: writing out/checkpoint-3/optimizer.pt failed: no space left
    on the device (12.0 MiB free); nothing was marked complete, ..."``.
    """
    filename = getattr(err, "filename", None)
    if filename is None and os.path.isdir(folder):
        filename = _newest_file(folder)
    code = _errno_of(err)
    reasons = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded",
               errno.EACCES: "permission denied", errno.EPERM: "permission denied",
               errno.EROFS: "the file system is read-only"}
    if code in reasons:
        why = reasons[code]
    elif isinstance(err, RuntimeError):
        why = f"torch could not write it, as on a full disk ({str(err).splitlines()[0][:120]})"
    else:
        why = f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
    where = f"writing {filename} failed" if filename else "writing failed"
    return (f"cannot save checkpoint {folder}: {where}: {why} ({_free_space(folder)}); nothing was marked complete, "
            "a resume skips this checkpoint. Free space or give output_dir a writable disk, then resume")


# ---------------------------------------------------------------- one writer per output folder
LOCK_NAME = "_trl_explore.lock"
"""The lock file in ``output_dir`` (a leading ``_``: Transformers' Hub upload of ``output_dir`` skips such names)."""


class OutputDirInUse(RuntimeError):
    """Another run holds ``output_dir``'s lock; the message names the folder and that run's process."""


_RUN_FOLDERS: set[str] = set()
"""The output folders whose lock this process's run holds (:func:`run_output_lock`), by real path."""


class OutputDirLock:
    """One writer per output folder: an exclusive ``fcntl.flock`` on ``folder/LOCK_NAME``, held from
    :meth:`acquire` to :meth:`release` (or the process's end: the kernel drops the lock of a killed process, so none
    is left stale). The file holds the holder's pid, host, start time and command line, for the refusal's message.

    A lock is per open file: a second lock in the same process on the same folder is refused too. Where ``fcntl``
    does not exist (Windows) nothing is locked. On NFS, Linux maps ``flock`` to a lock the server keeps.

    Args:
        folder: the run's ``output_dir`` (created if missing).
    """

    def __init__(self, folder: str):
        self.folder = folder
        self.path = os.path.join(folder, LOCK_NAME)
        self._fd = None

    def acquire(self) -> None:
        """Take the lock.

        Raises:
            OutputDirInUse: another process holds it (names the folder and the holder's pid, host and command).
        """
        try:
            import fcntl
        except ImportError:  # Windows
            return
        os.makedirs(self.folder, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                os.close(fd)
                raise
            holder = _read_holder(fd)
            os.close(fd)
            raise OutputDirInUse(
                f"output_dir {self.folder} is in use by another run ({holder}): two runs writing one folder overwrite "
                "each other's checkpoints. Wait for it to end, stop it, or give this run another output_dir") from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(_command_line())[:1000]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (the file stays: deleting it would let two later runs lock two different files)."""
        if self._fd is not None:
            import fcntl

            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None


def check_output_dir_free(folder: str) -> None:
    """Refuse early, before any model or data loads, an ``output_dir`` whose lock another run holds
    (:class:`OutputDirLock`), writing nothing: no folder is created, no file written, the lock is only tried and let
    go. The run takes the lock itself when it trains (a run that starts in between is still refused there).

    Raises:
        OutputDirInUse: as :meth:`OutputDirLock.acquire` (names the folder and the holder's pid, host and command).
    """
    try:
        import fcntl
    except ImportError:  # Windows
        return
    path = os.path.join(folder, LOCK_NAME)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # no lock file: no run of this package has used the folder
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return
        raise OutputDirInUse(
            f"output_dir {folder} is in use by another run ({_read_holder(fd)}): two runs writing one folder "
            "overwrite each other's checkpoints. Wait for it to end, stop it, or give this run another "
            "output_dir") from None
    finally:
        os.close(fd)  # closing drops the lock this call may have taken


def held_by_this_run(folder: str) -> bool:
    """Whether this process's run already holds ``folder``'s lock (:func:`run_output_lock`): the trainer then takes
    no second one (a second lock in one process is refused, :class:`OutputDirLock`)."""
    return os.path.realpath(folder) in _RUN_FOLDERS


@contextlib.contextmanager
def run_output_lock(folder: str, take: bool = True) -> Iterator[None]:
    """The whole run's hold on ``output_dir`` (the training scripts enter it right after parsing, before any data or
    model loads): with ``take``, :class:`OutputDirLock` is acquired at once, so a second run started while this one
    checks readiness or evaluates is refused at its start, in one line, before it writes anything; without it (a run
    that trains and saves nothing) the folder is only checked (:func:`check_output_dir_free`). On exit the lock is let
    go, and a folder this call created that holds nothing but the lock file (a run that stopped before writing) is
    removed.

    Raises:
        OutputDirInUse: another run holds the folder (names it and that run's pid, host and command).
    """
    if not take:
        check_output_dir_free(folder)
        yield
        return
    existed = os.path.exists(folder)
    lock = OutputDirLock(folder)
    lock.acquire()
    _RUN_FOLDERS.add(os.path.realpath(folder))
    try:
        yield
    finally:
        _RUN_FOLDERS.discard(os.path.realpath(folder))
        lock.release()
        if not existed:
            with contextlib.suppress(OSError):
                if os.listdir(folder) == [LOCK_NAME]:
                    os.remove(os.path.join(folder, LOCK_NAME))
                    os.rmdir(folder)


def _command_line() -> list[str]:
    import sys

    return [os.path.basename(sys.argv[0]) if sys.argv else "python", *sys.argv[1:]]


def _shortened(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 4] + " ..."


def _read_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode() or "null")
        return (f"pid {holder['pid']} on {holder['host']}, started {holder['started']}: "
                f"{_shortened(holder['command'], 200)}")
    except (OSError, ValueError, TypeError, KeyError):
        return "a process that has not written its pid yet"
