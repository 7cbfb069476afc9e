"""Atomic writes, checksums and writers' locks: an interrupted write never leaves
something that loads, a damaged file is never trusted, two writers never race.

Prepared datasets and partitions record each file's size and sha256. Files up
to `REHASHED_BYTES` (64 MiB: labels, splits, a small graph's arrays) are hashed
at every load. Hashing the bigger ones at every load would cost seconds on big
graphs, so `check_files` re-hashes such a file only when its size or
modification time differs from the last time it was verified, remembered in
`.verified.json` beside the files (not written where the directory is
read-only: then every load re-hashes). A big file rewritten in place with its
size and modification time kept is not found by its hash: the loaders check
what they read instead (an out-of-range id is refused, not trained on).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from gnnrun.errors import GnnrunError

_TMP_MARK = ".tmp-"


@contextlib.contextmanager
def atomic_directory(final: Path, overwrite: bool = True) -> Iterator[Path]:
    """Yield a fresh temporary directory beside `final`; rename it into place on success.

    A rename within one file system is atomic, so readers see either the old
    directory, the new one, or none: never a half-written one. On any error the
    temporary directory is removed and an existing `final` is left untouched.
    """
    final = Path(final)
    tmp = final.with_name(f"{final.name}{_TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(final)
        tmp.mkdir()
    except OSError as exc:
        raise write_error(final, exc) from None
    try:
        yield tmp
        if final.exists():
            if not overwrite:
                raise FileExistsError(final)
            trash = final.with_name(f"{final.name}{_TMP_MARK}old-{uuid.uuid4().hex[:8]}")
            os.rename(final, trash)
            os.rename(tmp, final)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.rename(tmp, final)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and not isinstance(exc, FileExistsError):
            raise write_error(final, exc) from None
        raise


@contextlib.contextmanager
def writer_lock(target: Path) -> Iterator[None]:
    """Hold an exclusive lock for writing `target` (a file `.<name>.lock` beside it).

    Two runs preparing the same dataset or partition at once would both write it;
    with the lock, the second waits, then finds the first one's result. Where the
    directory is read-only (shared data) nobody can write `target` there: an existing
    `target` is then read unlocked; with none, the lock's `write_error` says so.
    """
    target = Path(target)
    lock = target.parent / f".{target.name}.lock"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        read_only = exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and not os.access(
            target.parent, os.W_OK
        )
        if not (read_only and target.exists()):
            raise write_error(lock, exc) from None
        fd = None  # nobody can write here, and there is something to read
    if fd is None:
        yield
        return
    try:
        with contextlib.suppress(OSError):  # a file system without locks: go on unlocked
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def remove_stale_temporaries(final: Path) -> None:
    """Remove temporaries left beside `final` by writers that died (their pid is gone)."""
    for leftover in final.parent.glob(f"{final.name}{_TMP_MARK}*"):
        pid_part = leftover.name[len(final.name) + len(_TMP_MARK) :].split("-")[0]
        if pid_part.isdigit() and _pid_alive(int(pid_part)):
            continue
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                leftover.unlink()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def atomic_file(path: Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Yield a temporary file beside `path`, fsync it and rename it into place on success.

    On any error (a full disk included) the temporary file is removed, the
    previous `path` stays as it was, and an OSError becomes a GnnrunError that
    names the file and the fix. Temporaries of writers that died are removed first.
    """
    path = Path(path)
    remove_stale_temporaries(path)
    tmp = path.with_name(f"{path.name}{_TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise write_error(path, exc) from None
        raise


def atomic_link(source: Path, path: Path) -> None:
    """Make `path` hold `source`'s contents, atomically: a hard link (no space, and a
    later atomic rewrite of `source` leaves `path` as it was), or a copy where the two
    are on different file systems; the previous `path` stays until the rename."""
    source, path = Path(source), Path(path)
    if path.exists() and os.path.samefile(source, path):
        return
    remove_stale_temporaries(path)
    tmp = path.with_name(f"{path.name}{_TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        os.link(source, tmp)
    except OSError:  # another file system, or one without hard links: copy
        with atomic_file(path, "wb") as f, open(source, "rb") as original:
            shutil.copyfileobj(original, f)
        return
    try:
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise write_error(path, exc) from None


@contextlib.contextmanager
def atomic_rows(
    path: Path, shape: tuple[int, ...], dtype: Any
) -> Iterator[Callable[[np.ndarray], None]]:
    """Write a `.npy` of `shape` row block by row block: yield `append(rows)`, which writes
    rows after the previous ones (sequential writes: no page faults of a mapped file);
    fsync and rename into place once all shape[0] rows are written, as `atomic_file`."""
    dtype = np.dtype(dtype)
    written = 0
    with atomic_file(path, "wb") as f:
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False}
        np.lib.format.write_array_header_1_0(f, {**header, "shape": tuple(shape)})

        def append(rows: np.ndarray) -> None:
            nonlocal written
            block = np.ascontiguousarray(rows, dtype=dtype)
            if block.shape[1:] != tuple(shape[1:]) or written + block.shape[0] > shape[0]:
                raise ValueError(
                    f"rows of shape {block.shape} do not continue {shape} at {written}"
                )
            f.write(block.data)
            written += block.shape[0]

        yield append
        if written != shape[0]:
            raise ValueError(f"{path}: {written} of {shape[0]} rows written")


def mapped_rows(path: Path, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A new `.npy` of `shape`, memory-mapped for writing, its blocks reserved on disk first.

    A map of a sparse file (np.lib.format.open_memmap) takes its blocks as pages are
    first written; on a full file system that write kills the process with SIGBUS.
    Reserving them (posix_fallocate, else zeros written) turns that into a GnnrunError
    naming the directory, before anything is mapped."""
    path = Path(path)
    dtype = np.dtype(dtype)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False}
    try:
        with open(path, "wb") as f:
            np.lib.format.write_array_header_1_0(f, {**header, "shape": tuple(shape)})
            f.flush()
            offset = f.tell()
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if size:
                _reserve(f, offset, size)
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.unlink()
        raise write_error(path, exc) from None
    return np.lib.format.open_memmap(path, mode="r+")


def _reserve(f: Any, offset: int, size: int) -> None:
    """Allocate `size` bytes of `f` from `offset`: ENOSPC now rather than SIGBUS later."""
    try:
        os.posix_fallocate(f.fileno(), offset, size)
        return
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
    zeros = bytes(min(size, 1 << 24))  # a file system that cannot allocate ahead: write
    f.seek(offset)
    left = size
    while left:
        left -= f.write(zeros[: min(left, len(zeros))])
    f.flush()
    os.fsync(f.fileno())


# numpy's message for a short write (`tofile`, `np.save`; counted in items), an OSError
# without errno: what a full disk looks like to it.
_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")


def write_error(path: Path, exc: OSError) -> GnnrunError:
    """One line for a failed write: what, where, and what to do."""
    reason = (exc.strerror or str(exc)).lower()
    short = _SHORT_WRITE.fullmatch(str(exc).strip())
    if exc.errno == errno.ENOSPC or short:
        cut = f" ({short[2]} of {short[1]} written)" if short else ""
        reason = f"no space left on device on {Path(path).parent}{cut}"
        fix = "free some space there, or write elsewhere"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "make the directory writable, or write elsewhere"
    else:
        fix = "check the file system"
    return GnnrunError(f"cannot write {path}: {reason}; {fix}")


def check_folder_path(folder: Path, key: str) -> None:
    """Refuse, before any work, a folder that could not be made because it, or a folder
    above it, is a file: found otherwise at the first write, after the work."""
    folder = Path(folder)
    for part in (folder, *folder.parents):
        if part.exists():
            if not part.is_dir():
                raise GnnrunError(
                    f"{key}={folder}: {part} is a file, not a directory; give {key} a directory"
                )
            return


def write_json_atomic(path: Path, payload: Any) -> None:
    with atomic_file(path) as f:
        json.dump(payload, f, indent=2, sort_keys=True)
        f.write("\n")


def write_json(path: Path, payload: Any) -> None:
    """Write JSON into a directory that `atomic_directory` renames into place.

    A plain write: the directory's rename is the atomic step. An OSError (a full
    disk) propagates, so that `atomic_directory` names the directory being written,
    not its temporary name, and removes the temporary directory.
    """
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def read_json(path: Path, fix: str = "write it again") -> Any:
    """The JSON in `path`; a file that cannot be read or is not valid JSON is refused
    naming it and `fix`."""
    try:
        with open(path) as f:
            return json.load(f)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise GnnrunError(f"{path} is not valid JSON ({exc}): {fix}") from None
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        raise GnnrunError(f"cannot read {path} ({reason}): {fix}") from None


# What every file record of a manifest holds (see `save_array`).
RECORD_FIELDS: dict[str, type] = {"bytes": int, "sha256": str, "shape": list, "dtype": str}


def read_manifest(
    directory: Path,
    name: str,
    version: int,
    what: str,
    fix: str,
    fields: dict[str, type | tuple[type, ...]] | None = None,
    damaged_fix: str | None = None,
) -> dict[str, Any]:
    """Read `directory/name` (meta.json, manifest.json), refusing a missing one, another
    version, or one of the wrong shape: not a JSON object, a file record without its
    `RECORD_FIELDS`, or a top-level field of `fields` missing or of another type.

    `fix` says how to make a missing one, `damaged_fix` (default `fix`) how to replace a
    damaged one. An interrupted atomic write leaves no directory, hence no manifest:
    "missing" covers that case too.
    """
    path = Path(directory) / name
    damaged_fix = damaged_fix or fix
    if not path.is_file():
        raise GnnrunError(f"no {what} at {directory} ({name} missing); {fix}")
    manifest = read_json(path, damaged_fix)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise GnnrunError(f"{path} is not a gnnrun {name} (no file records): {damaged_fix}")
    if manifest.get("format_version") != version:
        raise GnnrunError(
            f"{directory} holds {what} format {manifest.get('format_version')}, "
            f"this gnnrun reads {version}; {fix}"
        )
    problem = shape_problem(manifest, fields or {})
    for rel, record in manifest["files"].items():
        problem = problem or shape_problem(record, RECORD_FIELDS, f"the record of {rel}")
    if problem:
        raise GnnrunError(f"{path} is damaged ({problem}): {damaged_fix}")
    return manifest


def shape_problem(
    value: Any, fields: dict[str, type | tuple[type, ...]], what: str = "it"
) -> str | None:
    """Why `value` is not a JSON object with `fields` of those types (None: it is)."""
    if not isinstance(value, dict):
        return f"{what} is {type(value).__name__}, not an object"
    for key, kind in fields.items():
        if key not in value:
            return f"{what} lacks {key!r}"
        if not isinstance(value[key], kind) or (kind is int and isinstance(value[key], bool)):
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            return f"{what} has {key!r} of type {type(value[key]).__name__}, expected {names}"
    return None


def sha256_file(path: Path, chunk: int = 1 << 24) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def save_array(directory: Path, name: str, array: np.ndarray) -> dict[str, Any]:
    """Save `name.npy` and return its record (shape, dtype, bytes, sha256) for a manifest."""
    path = Path(directory) / f"{name}.npy"
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)
    return {
        "shape": list(array.shape),
        "dtype": str(array.dtype),
        "bytes": path.stat().st_size,
        "sha256": sha256_file(path),
    }


def combined_digest(records: dict[str, dict[str, Any]]) -> str:
    """One checksum for a set of files: the sha256 of their names and sha256s in name order."""
    digest = hashlib.sha256()
    for name in sorted(records):
        digest.update(f"{name}:{records[name]['sha256']}\n".encode())
    return digest.hexdigest()


def check_recorded_file(file: Path, record: dict[str, Any], fix: str, verify: bool = False) -> None:
    """Refuse a file that is missing, of another size, or (with `verify`) of another sha256."""
    if not file.is_file():
        raise GnnrunError(f"{file} is missing: {fix}")
    size = file.stat().st_size
    if size != record["bytes"]:
        raise GnnrunError(f"{file} has {size} bytes, expected {record['bytes']}: {fix}")
    if verify and sha256_file(file) != record["sha256"]:
        raise GnnrunError(f"{file} does not match its checksum: {fix}")


def load_recorded_array(
    file: Path, record: dict[str, Any], fix: str, mmap: bool = True, verify: bool = False
) -> np.ndarray:
    """Load a .npy written by `save_array`, checked against its record; memory-mapped by default."""
    check_recorded_file(file, record, fix, verify)
    array = np.load(file, mmap_mode="r" if mmap else None, allow_pickle=False)
    if list(array.shape) != record["shape"] or str(array.dtype) != record["dtype"]:
        raise GnnrunError(
            f"{file} holds {array.dtype}{list(array.shape)}, expected "
            f"{record['dtype']}{record['shape']}: {fix}"
        )
    return array


VERIFIED = ".verified.json"
# Files up to this size are hashed at every load; bigger ones when their size or mtime changed.
REHASHED_BYTES = 64 << 20


def check_files(directory: Path, records: dict[str, dict[str, Any]], fix: str) -> list[str]:
    """Refuse a recorded file that is missing, of another size or of another sha256;
    return the files trusted without hashing (see the module docstring).

    Files up to REHASHED_BYTES are hashed every time; bigger ones only when their size
    or modification time changed since they were last verified.
    """
    directory = Path(directory)
    try:
        verified = json.loads((directory / VERIFIED).read_text())
    except (OSError, ValueError):
        verified = {}
    if not isinstance(verified, dict):
        verified = {}
    changed, trusted = False, []
    for rel, record in records.items():
        file = directory / rel
        check_recorded_file(file, record, fix)
        stat = file.stat()
        stamp = {"sha256": record["sha256"], "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        if verified.get(rel) == stamp and stat.st_size > REHASHED_BYTES:
            trusted.append(rel)
            continue
        if verified.get(rel) == stamp:  # small: hashed again, nothing new to remember
            if sha256_file(file) != record["sha256"]:
                raise GnnrunError(
                    f"{file} does not match its checksum (it changed after it was written, "
                    f"its size and modification time kept): {fix}"
                )
            continue
        if sha256_file(file) != record["sha256"]:
            raise GnnrunError(
                f"{file} does not match its checksum (it changed after it was written): {fix}"
            )
        verified[rel], changed = stamp, True
    if changed:
        with contextlib.suppress(GnnrunError):  # a read-only directory: verify every time
            write_json_atomic(directory / VERIFIED, verified)
    return trusted


def mark_verified(directory: Path, records: dict[str, dict[str, Any]]) -> None:
    """Remember files just written with these records as verified (no hash on first load).

    For a directory being written inside `atomic_directory` (see `write_json`)."""
    directory = Path(directory)
    stamps = {}
    for rel, record in records.items():
        stat = (directory / rel).stat()
        stamps[rel] = {
            "sha256": record["sha256"],
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
        }
    write_json(directory / VERIFIED, stamps)
