"""Files hlopt writes: an executable (`Compiled.save`) or `hlopt run`'s results (a .npz), each replacing its path atomically.

A write goes to a temporary file in the same folder, `.hlopt-tmp-` and eight
random characters (short, so any name the folder accepts can be written),
held under an exclusive `flock` while it is written and renamed over the path:
readers never see half a file. Over an existing regular file the new one keeps
its permission bits (a 0600 file stays 0600); a file with other hard links is
refused, since the rename would leave them holding the old contents, and so is
a FIFO, device, socket or folder; a link at the path is replaced, never followed. A temporary that a killed write left
behind (this user's, a regular file, no longer locked) is removed by the next
write to that folder.
"""

from __future__ import annotations

import fcntl
import io
import os
import re
import stat
import tempfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hlopt.passes.ir.locations import printable
from hlopt.runtime.errors import ExecutableFileError

TEMP_PREFIX = ".hlopt-tmp-"
_TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + r"[A-Za-z0-9_]{8}")  # tempfile.mkstemp's 8 random characters
# A temporary is left alone for this long after its last change: its writer may be between creating it and
# locking it.
SETTLE_S = 1.0


def write_atomically(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` through a locked temporary file renamed over it (see the module's docstring).

    Raises FileExistsError if `path` is a file with other hard links, OSError (naming `path`) if its folder
    does not exist or refuses the write.
    """
    path = Path(path)
    folder = path.parent
    mode = _kept_mode(path)
    remove_stale_temporaries(folder)
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=TEMP_PREFIX)
    except OSError as e:
        raise _unwritable(path, e) from None
    try:
        with os.fdopen(fd, "wb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # held until the rename: a live write is never removed
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _unwritable(path: Path, error: OSError) -> OSError:
    """`error`, which creating a file in `path`'s folder raised, as the same kind of error naming `path` and the fix."""
    folder = path.parent
    if not folder.exists():
        why = f"its folder {printable(folder)} does not exist: create it first (mkdir -p {printable(folder)})"
    elif not folder.is_dir():
        why = f"{printable(folder)} is a file, not a folder"
    else:
        why = f"its folder {printable(folder)} takes no new files ({error.strerror or error}): write to another folder"
    return type(error)(f"cannot write {printable(path)}: {why}")


def _kept_mode(path: Path) -> int:
    """The permission bits the new file gets: the existing regular file's, else 0666 less the umask.
    Raises FileExistsError for a path that holds something other than a regular file or a link."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # no such file, or no such folder (the write says so)
        st = None
    if st is None or stat.S_ISLNK(st.st_mode):
        mask = os.umask(0o022)
        os.umask(mask)
        return 0o666 & ~mask
    if not stat.S_ISREG(st.st_mode):
        raise FileExistsError(f"{printable(path)} is not a regular file (a FIFO, a device, a socket or a folder): "
                              "hlopt writes regular files only; name another path")
    if st.st_nlink > 1:
        raise FileExistsError(f"{printable(path)} has {st.st_nlink - 1} other hard link(s); replacing it would leave "
                              "them holding the old contents: remove it first, or write to another path")
    return stat.S_IMODE(st.st_mode)


def remove_stale_temporaries(folder: str | os.PathLike) -> None:
    """Remove the temporaries of writes to `folder` that were killed (this user's regular files, unlocked)."""
    uid, now = os.getuid(), time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return  # the write itself reports a folder it cannot use
    for entry in entries:
        if not _TEMP_NAME.fullmatch(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or now - st.st_mtime < SETTLE_S:
                continue
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fst = os.fstat(fd)
            if (fst.st_dev, fst.st_ino) == (st.st_dev, st.st_ino):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while its writer lives
                os.unlink(entry.path)
        except OSError:
            pass
        finally:
            os.close(fd)


def results_npz(names: Sequence[str], arrays: Sequence[np.ndarray]) -> bytes:
    """A .npz holding `arrays` under `names` (np.load reads them back by name); raises ExecutableFileError
    for a name that is not a plain member name, or two outputs with one name.

    The archive is written member by member, as np.savez does, but no name is
    an argument of a function here: `file` or `allow_pickle` is an output like
    any other.
    """
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if not name or name in (".", "..") or any(c in name for c in "/\\\0") or not name.isprintable():
            raise ExecutableFileError(f"output {i} is named '{printable(name)}', which cannot name an array of a "
                                      ".npz (empty, '.', '..', or with '/', '\\' or unprintable characters)")
        if name in seen:
            raise ExecutableFileError(f"outputs {seen[name]} and {i} are both named '{printable(name)}' "
                                      "(a list under 'a' has 'a.0'): a .npz cannot hold both")
        seen[name] = i
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, array in zip(names, arrays, strict=True):
            with z.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def npz_names(data: bytes) -> list[str]:
    """The array names a .npz's bytes hold, as np.load lists them."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [n.removesuffix(".npy") for n in z.namelist()]
