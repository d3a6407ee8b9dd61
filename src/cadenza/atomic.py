"""The one place that writes files atomically.

Every file cadenza produces (token stores, checkpoints, configs, MIDI) is written to a temporary
name in the destination folder and renamed into place, so a crash or Ctrl-C never leaves a file
that looks complete but is not. `rename` within one filesystem is atomic on POSIX and Windows.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600 files; finished files get the usual mode
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        _fsync(tmp_path)
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Build a folder under a temporary name and rename it into place when the block succeeds.

    An existing folder at `path` is replaced only after the new one is complete.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_UMASK)
    try:
        yield tmp
        if path.exists():
            trash = path.with_name(f".{path.name}.old")
            shutil.rmtree(trash, ignore_errors=True)
            os.replace(path, trash)
            os.replace(tmp, path)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _fsync(path: Path) -> None:
    try:
        with open(path, "rb") as f:
            os.fsync(f.fileno())
    except OSError:  # some filesystems (e.g. certain network mounts) refuse fsync; rename still protects
        pass


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


class FolderBusy(RuntimeError):
    """Another cadenza process is writing to this folder."""


LOCK_NAME = ".cadenza.lock"


@contextlib.contextmanager
def exclusive(folder: str | os.PathLike, what: str) -> Iterator[Path]:
    """Hold an exclusive lock on `folder` (created if needed) while the block runs.

    Two `cadenza prepare` (or `train`) into one folder would each write a complete-looking result
    and one would be lost; the second one stops instead, naming the holder's pid. The lock is an
    `fcntl.flock` on ``folder/.cadenza.lock``: the kernel releases it when its process dies, so a
    crash never leaves a folder locked. (No locking where fcntl does not exist, i.e. Windows.)
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield folder
        return
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "unknown pid"
            raise FolderBusy(f"{folder} is in use by another cadenza process ({holder}); wait for it to "
                             "finish or choose another folder") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, cadenza {what}\n".encode(), 0)
        yield folder
    finally:
        os.close(fd)  # closing releases the lock


def remove_leftovers(folder: str | os.PathLike) -> list[Path]:
    """Delete what interrupted atomic writes left in `folder`: hidden ``.NAME.*.tmp`` files and
    folders, and ``.NAME.old`` folders of a replacement cut short. Call it only while holding
    `exclusive` on the folder, so no other process's write in progress is taken for a leftover."""
    folder = Path(folder)
    gone = []
    for p in folder.glob(".*") if folder.is_dir() else ():
        if p.name.endswith((".tmp", ".old")):
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
            gone.append(p)
    return gone


@contextlib.contextmanager
def output_folder(folder: str | os.PathLike, what: str, keep: Any = None) -> Iterator[Path]:
    """`exclusive` on an output folder, its leftovers removed first; if the block fails and this
    command created the folder, the folder goes too, unless `keep(folder)` says it holds something
    worth keeping (a run's checkpoints)."""
    folder = Path(folder)
    created = not folder.exists()
    try:
        with exclusive(folder, what):
            remove_leftovers(folder)
            yield folder
    except BaseException:
        if created and folder.exists() and not (keep and keep(folder)):
            shutil.rmtree(folder, ignore_errors=True)
        raise
