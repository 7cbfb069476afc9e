"""Atomic writes and checksums: an interrupted write never leaves something that loads."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
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
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(final)
    tmp = final.with_name(f"{final.name}{_TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
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
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


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


def write_error(path: Path, exc: OSError) -> GnnrunError:
    """One line for a failed write: what, where, and what to do."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        fix = "free some space there, or write elsewhere"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "make the directory writable, or write elsewhere"
    else:
        fix = "check the file system"
    return GnnrunError(f"cannot write {path}: {reason.lower()}; {fix}")


def write_json_atomic(path: Path, payload: Any) -> None:
    with atomic_file(path) as f:
        json.dump(payload, f, indent=2, sort_keys=True)
        f.write("\n")


def read_json(path: Path) -> Any:
    with open(path) as f:
        return json.load(f)


def read_manifest(directory: Path, name: str, version: int, what: str, fix: str) -> dict[str, Any]:
    """Read `directory/name` (meta.json, manifest.json), refusing a missing one or another version.

    An interrupted atomic write leaves no directory, hence no manifest: "missing"
    covers that case too.
    """
    path = Path(directory) / name
    if not path.is_file():
        raise GnnrunError(f"no {what} at {directory} ({name} missing); {fix}")
    manifest = read_json(path)
    if manifest.get("format_version") != version:
        raise GnnrunError(
            f"{directory} holds {what} format {manifest.get('format_version')}, "
            f"this gnnrun reads {version}; {fix}"
        )
    return manifest


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
