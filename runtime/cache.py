"""The persistent compilation cache: `hlopt.set_cache_dir(path)` or `HLOPT_CACHE_DIR`.

An entry is a container (runtime/container.py) under the user's key (a MAC,
runtime/keys.py) holding a serialized PJRT executable, the post-pass module
and its build flags. Its name is its key: the SHA-256 of the module before
the pipeline with debug locations stripped, the pipeline, hlopt's version, a
digest of the passes' code, the devices, the platform and its version, the
jax and jaxlib versions, XLA_FLAGS and the process layout, so a hit skips
the passes. (A module that calls back into the user's Python, i.e. holds an
`hlopt.custom_partitioning`, is keyed after the passes instead: its
partitioner's code is not in the IR.)

The folder is created 0700; one that is a symbolic link, that another user
owns, that group or others can write, or below a folder others could
change, is refused with a warning, as ssh's StrictModes refuses such keys
(runtime/paths.py). An entry whose MAC does not verify, or that is not a
regular file, is a miss and is replaced. Writes go to a temporary file
renamed into place, so concurrent processes never see half an entry; the
least recently used entries are evicted above a size limit. Eviction (and
the removal of a dead process's temporary file) removes only what the cache
itself writes: regular files of this user named as entries
(`<64 hex digits>.hlx`) or temporary files (`.tmp-*.hlx`), found through the
folder opened without following links; anything else in the folder (a
user's own `model.hlx`, a link) is left alone and not counted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import importlib.metadata
import math
import os
import re
import stat
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import jaxlib

import hlopt.passes
from hlopt.compiler.program import module_to_bytecode
from hlopt.passes.ir.annotation_names import BCOO_PREFIX, CUSTOM_PARTITIONING
from hlopt.passes.mlir import ir, passmanager
from hlopt.passes.tpu import sparse_products
from hlopt.runtime import container
from hlopt.runtime.errors import warn_in_user_code
from hlopt.runtime.keys import KeyFileError, user_key
from hlopt.runtime.paths import folder_problem
from hlopt.runtime.pjrt import BuildFlags

ENV_DIR = "HLOPT_CACHE_DIR"
ENV_MAX_BYTES = "HLOPT_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 << 30
ENTRY_FORMAT = "hlopt-cache-entry"
ENTRY_SECTIONS = ("executable", "module")
SUFFIX = ".hlx"
_STALE_TEMP_SECONDS = 3600
_ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.hlx")  # cache_key's hex digest + SUFFIX
_TEMP_NAME = re.compile(r"\.tmp-[A-Za-z0-9_]{1,32}\.hlx")  # tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX)
# The annotation whose lowering runs the user's Python (the partitioner): its IR does not pin the result.
_USER_CODE_MARKER = CUSTOM_PARTITIONING.encode()
# the annotations of sparse ops, whose products a platform pass may compute by a registered kernel
_SPARSE_MARKER = BCOO_PREFIX.encode()


class CacheDirError(ValueError):
    """A cache folder hlopt will not use: not a folder, another user's, or writable by others."""


# The `jax.monitoring` events of hlopt's cache, named as jax names its own cache's
# (`/jax/compilation_cache/cache_hits`): a listener sees both caches, told apart. (Programs
# with hlopt operations under plain `jax.jit` are in jax's cache and record jax's events.)
HIT_EVENT = "/hlopt/compilation_cache/cache_hits"
MISS_EVENT = "/hlopt/compilation_cache/cache_misses"


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    """What `hlopt.cache_info()` reports; counts are for this process.

    Attributes:
      directory: the cache folder, or None when caching is off.
      hits: compiles this process took from the cache.
      misses: compiles this process stored in the cache.
      entries: the entries in the folder.
      size_bytes: the folder's size.
      max_bytes: the size above which least recently used entries are evicted.

    Example:
      >>> import hlopt
      >>> info = hlopt.cache_info()
      >>> info.hits >= 0 and info.misses >= 0
      True
    """

    directory: str | None
    hits: int
    misses: int
    entries: int
    size_bytes: int
    max_bytes: int


@dataclasses.dataclass(frozen=True)
class CacheEntry:
    """An authenticated entry: the executable, the post-pass module's bytecode, the build flags."""

    executable: bytes = dataclasses.field(repr=False)
    module: bytes = dataclasses.field(repr=False)
    flags: BuildFlags


class CompilationCache:
    """A folder of cache entries, shared safely between processes."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES):
        if max_bytes <= 0:
            raise ValueError(f"cache size limit must be positive, got {max_bytes}")
        self.directory = Path(directory).expanduser()
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        check_directory(self.directory)
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}{SUFFIX}"

    def get(self, key: str, n_outputs: int) -> CacheEntry | None:
        """The entry stored under `key`, or None: missing, damaged, forged or for another key."""
        path = self.path(key)
        mac_key = _mac_key()
        if mac_key is None:
            return None
        try:
            found = container.read_path(path, str(path), ENTRY_FORMAT, ENTRY_SECTIONS, mac_key,
                                        lambda authenticated: ENTRY_SECTIONS if authenticated else (),
                                        follow_symlinks=False)
            if not found.authenticated or found.manifest.get("key") != key:
                return None
            flags = BuildFlags.decode(found.manifest.get("flags"), n_outputs)
        except (container.ExecutableFileError, ValueError):
            return None
        with contextlib.suppress(OSError):  # a read-only cache still serves hits
            os.utime(path, follow_symlinks=False)  # recently used: last to be evicted
        return CacheEntry(found.sections["executable"], found.sections["module"], flags)

    def put(self, key: str, executable: bytes, module: bytes, flags: BuildFlags) -> None:
        """Store an entry under `key` atomically, then evict down to the size limit."""
        mac_key = _mac_key()
        if mac_key is None:
            return
        data = container.pack({"format": ENTRY_FORMAT, "key": key, "flags": flags.encode()},
                              {"executable": executable, "module": module}, mac_key)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=SUFFIX)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path(key))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.evict(keep=self.path(key))

    def record(self, hit: bool) -> None:
        """Count a hit or a miss, and record it as a `jax.monitoring` event (`HIT_EVENT`, `MISS_EVENT`)."""
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1
        jax.monitoring.record_event(HIT_EVENT if hit else MISS_EVENT)

    def _entries(self) -> list[tuple[float, int, str]]:
        """(mtime, size, name) of each entry this cache wrote; removes temporary files of dead writers."""
        found = []
        with _open_folder(self.directory) as fd:
            for name in os.listdir(fd):
                entry, temp = _ENTRY_NAME.fullmatch(name), _TEMP_NAME.fullmatch(name)
                if not (entry or temp):
                    continue
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue  # removed by another process meanwhile
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                    continue  # not something this cache wrote
                if entry:
                    found.append((st.st_mtime, st.st_size, name))
                elif time.time() - st.st_mtime > _STALE_TEMP_SECONDS:
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=fd)  # left by a process that died mid-write
        return found

    def evict(self, keep: Path | None = None) -> None:
        """Remove least recently used entries until the total size fits the limit."""
        entries = sorted(self._entries(), key=lambda e: e[0])
        total = sum(size for _, size, _ in entries)
        with _open_folder(self.directory) as fd:
            for _, size, name in entries:
                if total <= self.max_bytes:
                    break
                if keep is None or name != keep.name:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=fd)
                    total -= size

    def info(self) -> CacheInfo:
        entries = self._entries()
        return CacheInfo(str(self.directory), self.hits, self.misses, len(entries),
                         sum(size for _, size, _ in entries), self.max_bytes)


@contextlib.contextmanager
def _open_folder(directory: Path) -> Iterator[int]:
    """A descriptor of the cache folder, opened without following a link (it was checked when the cache was made)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        yield fd
    finally:
        os.close(fd)


def check_directory(directory: Path) -> None:
    """Refuse (CacheDirError) a cache folder that others could put entries into, or that is a link."""
    problem = folder_problem(directory, "the cache folder")
    if problem is not None:
        raise CacheDirError(problem)


def _mac_key() -> Any:
    """The user's key, or None (with a warning) when it cannot be used: the cache is then off."""
    try:
        return user_key()
    except KeyFileError as e:
        warn_in_user_code(f"hlopt: compiling without the compilation cache: {e}")
        return None


_state: dict[str, Any] = {"cache": None, "configured": False}


def max_bytes_from_env() -> int:
    """`HLOPT_CACHE_MAX_BYTES` (an integer, or a float such as 1e9), else the default (with a warning if bad)."""
    text = os.environ.get(ENV_MAX_BYTES, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
            value = int(number) if math.isfinite(number) and number == int(number) else 0
        except ValueError:
            value = 0
    if value <= 0:
        warn_in_user_code(f"hlopt: {ENV_MAX_BYTES}={text[:40]!r} is not a positive number of bytes; "
                          f"using the default, {DEFAULT_MAX_BYTES}")
        return DEFAULT_MAX_BYTES
    return value


def set_cache_dir(path: str | os.PathLike | None, *, max_bytes: int | None = None) -> None:
    """Use `path` as the persistent compilation cache (None turns caching off).

    A folder that cannot be created, or that others could write into, is refused with a
    warning, and compiling goes on without a cache. `HLOPT_CACHE_DIR` sets the folder too.

    Args:
      path: the cache folder (created if missing), or None.
      max_bytes: the folder's size cap (default `HLOPT_CACHE_MAX_BYTES` or 2 GiB); least
        recently used entries are evicted first.

    Raises:
      ValueError: `max_bytes` is not positive.

    Example:
      >>> import tempfile
      >>> import hlopt
      >>> previous = hlopt.cache_info().directory
      >>> folder = tempfile.mkdtemp()
      >>> hlopt.set_cache_dir(folder, max_bytes=2**26)
      >>> hlopt.cache_info().directory == folder
      True
      >>> hlopt.set_cache_dir(previous)            # back to the cache in use before
    """
    if max_bytes is not None and max_bytes <= 0:
        raise ValueError(f"cache size limit must be positive, got {max_bytes}")
    cache = None
    if path is not None:
        try:
            cache = CompilationCache(path, max_bytes or max_bytes_from_env())
        except (OSError, CacheDirError) as e:
            detail = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            warn_in_user_code(f"hlopt: compiling without the compilation cache: {path}: {detail}")
    _state["cache"] = cache
    _state["configured"] = True


@contextlib.contextmanager
def using_cache_dir(path: str | os.PathLike | None, *, max_bytes: int | None = None) -> Iterator[None]:
    """`set_cache_dir(path)` for the duration of a `with` block, then the previous setting."""
    saved = dict(_state)
    set_cache_dir(path, max_bytes=max_bytes)
    try:
        yield
    finally:
        _state.update(saved)


def active_cache() -> CompilationCache | None:
    """The cache set by `set_cache_dir`, else the one `HLOPT_CACHE_DIR` names, else None."""
    if not _state["configured"]:
        set_cache_dir(os.environ.get(ENV_DIR) or None)
    return _state["cache"]


def cache_info() -> CacheInfo:
    """Hits and misses of this process, and the entries and size of the cache folder.

    Returns:
      A `CacheInfo`.

    Example:
      >>> import tempfile
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> previous = hlopt.cache_info().directory
      >>> hlopt.set_cache_dir(tempfile.mkdtemp())
      >>> _ = hlopt.jit(lambda x: x - 1)(jnp.ones(2))
      >>> info = hlopt.cache_info()
      >>> info.entries, info.misses >= 1
      (1, True)
      >>> hlopt.set_cache_dir(previous)            # back to the cache in use before
    """
    cache = active_cache()
    if cache is None:
        return CacheInfo(None, 0, 0, 0, 0, 0)
    return cache.info()


def stripped_bytecode(module: ir.Module) -> bytes:
    """The module's bytecode with every debug location replaced by `unknown`.

    A cache key hashes it, and PJRT compiles it (runtime/compile.py).
    """
    with module.context:
        copy = module.operation.clone()
        strip = passmanager.PassManager.parse("builtin.module(strip-debuginfo)")
        strip.enable_verifier(False)  # verifying a copy that is only hashed would be most of the time
        strip.run(copy)
    return module_to_bytecode(copy)


def calls_user_code(bytecode: bytes) -> bool:
    """Whether the passes will call the user's Python on this module (its IR does not pin the result)."""
    return _USER_CODE_MARKER in bytecode


@functools.cache
def _source_digest(folder: str, files: tuple[str, ...]) -> str:
    """SHA-256 of these files' names (relative to `folder`) and contents."""
    h = hashlib.sha256()
    for path in files:
        with open(path, "rb") as f:
            h.update(os.path.relpath(path, folder).encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


def passes_digest() -> str:
    """SHA-256 of the source of every pass (the `hlopt.passes` package and its subpackages)."""
    return _source_digest(_PASSES_FOLDER, _python_files(_PASSES_FOLDER, recursive=True))


def kernels_digest(bytecode: bytes) -> str:
    """For a module with sparse products, SHA-256 of the package of the kernel registered with
    `tpu-sparse-products` (`hlopt.sparse`, whose Pallas TPU products the pass copies into programs),
    or "none" when no kernel is registered; "" for any other module, whose program no kernel changes
    (so its key is the same whether or not the process imported `hlopt.sparse`)."""
    if _SPARSE_MARKER not in bytecode:
        return ""
    kernel = sparse_products.registered_kernel()
    source = inspect.getsourcefile(kernel) if kernel is not None else None
    if not source:
        return "none"
    folder = os.path.dirname(source)
    return _source_digest(folder, _python_files(folder, recursive=False))


_PASSES_FOLDER = os.path.dirname(hlopt.passes.__file__)


@functools.cache
def _python_files(folder: str, recursive: bool) -> tuple[str, ...]:
    """The Python files of `folder` (and, if `recursive`, of its subpackages), in a fixed order."""
    files = []
    for root, dirs, names in os.walk(folder):  # os, not pathlib: a hit's first key
        dirs[:] = sorted(d for d in dirs if not d.startswith(("__", "."))) if recursive else []
        files.extend(os.path.join(root, name) for name in sorted(n for n in names if n.endswith(".py")))
    return tuple(files)


@functools.cache
def hlopt_version() -> str:
    """hlopt's installed version, read from the metadata's header alone (parsing all of it would slow every lookup)."""
    try:
        found = importlib.metadata.distribution("hlopt")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
    text = found.read_text("METADATA") or found.read_text("PKG-INFO") or ""
    return next((line[len("Version: "):] for line in text.splitlines() if line.startswith("Version: ")), "unknown")


def cache_key(bytecode: bytes, pipeline: str, devices: Sequence[jax.Device], use_shardy: bool, client: Any,
              compiler_options: Sequence[tuple[str, Any]] = (), precision: str | None = None) -> str:
    """The SHA-256 naming what running `pipeline` on a module (`stripped_bytecode`), with the program's
    `precision` (`Lowered.precision`), and compiling it with the XLA options `compiler_options` (sorted
    pairs, `hlopt.compiler.stages.check_compiler_options`) gives."""
    h = hashlib.sha256()
    for part in (
        b"hlopt-cache-key-v3",  # v3: executables compiled without debug locations
        bytecode,
        pipeline,
        hlopt_version(),
        passes_digest(),
        kernels_digest(bytecode),
        ",".join(str(d.id) for d in devices),
        str(bool(use_shardy)),
        client.platform,
        client.platform_version,
        jax.__version__,
        jaxlib.__version__,
        os.environ.get("XLA_FLAGS", ""),
        f"{jax.process_index()}/{jax.process_count()}",
        repr(tuple(compiler_options)),
        str(precision),
    ):
        data = part if isinstance(part, bytes) else part.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()
