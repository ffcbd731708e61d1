"""Reading what users name (regular files only, bounded), and whether a folder hlopt keeps private files
in (the cache, the key's folder) could be tampered with.

`read_regular` opens a path without blocking, refuses anything but a
regular file (a FIFO would block forever, a link to /dev/zero would be read
without end) and reads no more than its limit.

As ssh's StrictModes checks the path to a user's keys: the folder itself must
not be a symbolic link, must be a folder, must belong to this user and must
not be writable by group or others; every folder above it (of its real path,
up to `/`) must belong to this user or to root and must not be writable by
group or others, except a root-owned sticky folder such as /tmp (there
others cannot rename or remove what is ours). ssh stops at the home folder;
this walk goes up to `/`.
"""

from __future__ import annotations

import errno
import os
import stat


def file_kind(mode: int) -> str:
    """What a file of `mode` is, in words (`a FIFO`, `a character device`...)."""
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "another kind of file"


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of the regular file `path` (links followed); OSError for another kind of file, unread, or
    one of more than `limit` bytes. Opened without blocking, so a FIFO with no writer is refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"not a regular file ({file_kind(st.st_mode)}); hlopt reads regular files only")
        fits = st.st_size <= limit
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1) if fits else b""  # limit + 1: the file may grow meanwhile
    finally:
        os.close(fd)
    if not fits or len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than the {limit} bytes hlopt reads")
    return data


def folder_problem(folder: str | os.PathLike, what: str) -> str | None:
    """What makes `folder` unsafe to keep `what` in (a sentence), or None if it is safe or does not exist."""
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot check {what} {folder}: {e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return (f"{what} {folder} is a symbolic link (to {os.path.realpath(folder)}); hlopt never follows one: "
                "name the folder itself")
    if not stat.S_ISDIR(st.st_mode):
        return f"{what} {folder} is not a folder"
    uid = os.getuid()
    if st.st_uid != uid:
        return f"{what} {folder} belongs to user id {st.st_uid}, not to you ({uid}); use a folder of your own"
    if st.st_mode & 0o022:
        return (f"{what} {folder} is writable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
                f"run `chmod 700 {folder}`")
    # Plain strings, not pathlib: loading a file checks the key's folder every time (os.path's walk
    # up from the real path names the same parents as Path.parents, at a third of the cost).
    parent = os.path.realpath(folder)
    while parent != (up := os.path.dirname(parent)):
        parent = up
        try:
            pst = os.stat(parent)
        except OSError as e:
            return f"cannot check {parent}, above {what} {folder}: {e.strerror}"
        if pst.st_uid not in (0, uid):
            return (f"{parent}, above {what} {folder}, belongs to user id {pst.st_uid}: they could replace "
                    "what is below it; use a folder whose parents are yours or root's")
        sticky_root = pst.st_uid == 0 and pst.st_mode & stat.S_ISVTX
        if pst.st_mode & 0o022 and not sticky_root:
            return (f"{parent}, above {what} {folder}, is writable by others (mode "
                    f"{stat.S_IMODE(pst.st_mode):04o}): they could replace what is below it")
    return None
