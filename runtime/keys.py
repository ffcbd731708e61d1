"""The user's key that authenticates executable files and cache entries (HMAC-SHA256).

The key is `HLOPT_KEY` when that is set and not empty, else the contents of
a key file, `$XDG_CONFIG_HOME/hlopt/key` (default `~/.config/hlopt/key`),
created with 32 random bytes (hex) and mode 0600 at first use. Like ssh
with its private keys, hlopt refuses a key file that others can read or
write, that another user owns, or whose folder is not private as
runtime/paths.py checks it. A key must be UTF-8 text of at least 32 bytes,
not all one byte. Machines that share executables share the key:
`export HLOPT_KEY=$(cat ~/.config/hlopt/key)` on each.
"""

from __future__ import annotations

import dataclasses
import hmac
import os
import secrets
import stat
from pathlib import Path

from hlopt.runtime.errors import ExecutableFileError
from hlopt.runtime.paths import folder_problem

ENV_KEY = "HLOPT_KEY"
MIN_KEY_BYTES = 32
_MAX_KEY_FILE_BYTES = 4096


class KeyFileError(ExecutableFileError):
    """The user's key cannot be used: an insecure or unreadable key file, or a weak HLOPT_KEY.

    Loading and saving files refuse with it; the compilation cache turns itself off with a warning.

    Example:
      >>> import hlopt
      >>> issubclass(hlopt.KeyFileError, hlopt.ExecutableFileError)
      True
    """

    __module__ = "hlopt"  # raised and printed as users import it


@dataclasses.dataclass(frozen=True)
class Key:
    """Key material and where it came from (for messages: never the key itself)."""

    secret: bytes
    source: str

    def mac(self, *parts: bytes) -> bytes:
        """HMAC-SHA256 of the concatenated `parts`."""
        h = hmac.new(self.secret, digestmod="sha256")
        for part in parts:
            h.update(part)
        return h.digest()


def key_file_path() -> Path:
    """`$XDG_CONFIG_HOME/hlopt/key`, or `~/.config/hlopt/key` (a relative XDG_CONFIG_HOME is ignored)."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "hlopt" / "key"


def user_key(*, create: bool = True) -> Key | None:
    """This user's key: HLOPT_KEY, else the key file (created if `create`; else None when missing).

    Raises KeyFileError for a weak HLOPT_KEY or an insecure or unreadable key file.
    """
    env = os.environ.get(ENV_KEY, "")
    if env:
        secret = os.fsencode(env)  # the bytes the environment holds, even if they are not UTF-8
        problem = weakness(secret)
        if problem is not None:
            raise KeyFileError(f"{ENV_KEY} {problem}")
        return Key(secret, ENV_KEY)
    path = key_file_path()
    text = _read_key_file(path)
    if text is None:
        if not create:
            return None
        text = _create_key_file(path)
    return Key(text.encode(), str(path))


def weakness(secret: bytes) -> str | None:
    """What makes `secret` unfit as a key (a phrase), or None."""
    advice = "use at least 32 random characters (e.g. `openssl rand -hex 32`)"
    try:
        secret.decode("utf-8")
    except UnicodeDecodeError:
        return f"is not UTF-8 text; {advice}"
    if len(secret) < MIN_KEY_BYTES:
        return f"has {len(secret)} bytes; {advice}"
    if len(set(secret)) == 1:
        return f"is one byte repeated ({secret[:1]!r}); {advice}"
    return None


def describe_key() -> str:
    """Which key this process uses, for messages: `HLOPT_KEY`, `the key in PATH` or `no key (...)`."""
    if os.environ.get(ENV_KEY):
        return ENV_KEY
    path = key_file_path()
    return f"the key in {path}" if path.exists() else f"no key ({path} does not exist yet)"


def _read_key_file(path: Path) -> str | None:
    """The key in `path`, None if there is no such file; refuses an insecure or malformed one."""
    problem = folder_problem(os.path.dirname(path), "the key folder")
    if problem is not None:
        raise KeyFileError(problem)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise KeyFileError(f"cannot open the key file {path}: {e.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise KeyFileError(f"the key file {path} is not a regular file; remove it, or set {ENV_KEY}")
    with os.fdopen(fd, "rb") as f:
        if st.st_uid != os.getuid():
            raise KeyFileError(f"the key file {path} belongs to user id {st.st_uid}, not to you "
                               f"({os.getuid()}); remove it, or set {ENV_KEY}")
        if st.st_mode & 0o077:
            raise KeyFileError(f"the key file {path} is accessible by others (mode {stat.S_IMODE(st.st_mode):04o}); "
                               f"run `chmod 600 {path}`, and make a new key if others may have read it")
        data = f.read(_MAX_KEY_FILE_BYTES + 1)
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        text = ""
    if (len(data) > _MAX_KEY_FILE_BYTES or not text.isprintable()
            or weakness(text.encode()) is not None):
        raise KeyFileError(f"the key file {path} does not hold a key (at least {MIN_KEY_BYTES} printable "
                           "ASCII characters, not all one); remove it and hlopt makes a new one")
    return text


def _create_key_file(path: Path) -> str:
    """Write a new random key to `path` (mode 0600, its folder 0700); another process may win the race."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".key.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)  # fails if another process created the key meanwhile: use theirs
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as e:
        raise KeyFileError(f"cannot create the key file {path}: {e.strerror}; set {ENV_KEY} instead") from None
    text = _read_key_file(path)
    if text is None:
        raise KeyFileError(f"the key file {path} vanished while it was being created")
    return text
