"""The persistent compilation cache: `hlopt.set_cache_dir(path)` or `HLOPT_CACHE_DIR`.

An entry is a container (runtime/container.py) holding one serialized PJRT
executable, named by its key: the SHA-256 of the post-pass module bytecode
with debug locations stripped, the compile options, the platform and its
version, the jax and jaxlib versions, XLA_FLAGS and the process layout.
Writes go to a temporary file renamed into place, so concurrent processes
never see half an entry; an entry that fails its checks is a miss and is
replaced; the least recently used entries are evicted above a size limit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import jaxlib
from jaxlib import xla_client as xc

from hlopt.compiler.program import module_to_bytecode, parse_module
from hlopt.passes.mlir import passmanager
from hlopt.runtime import container
from hlopt.runtime.pjrt import compile_with_options, get_client, load_executable

ENV_DIR = "HLOPT_CACHE_DIR"
ENV_MAX_BYTES = "HLOPT_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 << 30
ENTRY_FORMAT = "hlopt-cache-entry"
SUFFIX = ".hlx"
_STALE_TEMP_SECONDS = 3600


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    """What `hlopt.cache_info()` reports; counts are for this process."""

    directory: str | None
    hits: int
    misses: int
    entries: int
    size_bytes: int
    max_bytes: int


class CompilationCache:
    """A directory of cache entries, shared safely between processes."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES):
        if max_bytes <= 0:
            raise ValueError(f"cache size limit must be positive, got {max_bytes}")
        self.directory = Path(directory).expanduser()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}{SUFFIX}"

    def get(self, key: str) -> bytes | None:
        """The executable stored under `key`, or None (a damaged entry is a miss)."""
        path = self.path(key)
        try:
            data = path.read_bytes()
            manifest, sections = container.unpack(data, str(path), ENTRY_FORMAT, ("executable",))
            if manifest.get("key") != key:
                raise container.ExecutableFileError(f"{path}: holds the entry for another key")
        except (OSError, container.ExecutableFileError):
            return None
        with contextlib.suppress(OSError):  # a read-only cache still serves hits
            os.utime(path)  # recently used: last to be evicted
        return sections["executable"]

    def put(self, key: str, executable: bytes) -> None:
        """Store `executable` under `key` atomically, then evict down to the size limit."""
        data = container.pack({"format": ENTRY_FORMAT, "key": key}, {"executable": executable})
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
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    def _entries(self) -> list[tuple[float, int, Path]]:
        found = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            try:
                st = path.stat()
            except OSError:
                continue  # removed by another process meanwhile
            if path.name.startswith(".tmp-"):
                if time.time() - st.st_mtime > _STALE_TEMP_SECONDS:
                    path.unlink(missing_ok=True)  # left by a process that died mid-write
                continue
            found.append((st.st_mtime, st.st_size, path))
        return found

    def evict(self, keep: Path | None = None) -> None:
        """Remove least recently used entries until the total size fits the limit."""
        entries = sorted(self._entries(), key=lambda e: e[0])
        total = sum(size for _, size, _ in entries)
        for _, size, path in entries:
            if total <= self.max_bytes:
                break
            if path != keep:
                path.unlink(missing_ok=True)
                total -= size

    def info(self) -> CacheInfo:
        entries = self._entries()
        return CacheInfo(str(self.directory), self.hits, self.misses, len(entries),
                         sum(size for _, size, _ in entries), self.max_bytes)


_state: dict[str, Any] = {"cache": None, "configured": False}


def set_cache_dir(path: str | os.PathLike | None, *, max_bytes: int | None = None) -> None:
    """Use `path` as the persistent compilation cache (None turns caching off).

    `max_bytes` caps the directory's size (default `HLOPT_CACHE_MAX_BYTES` or
    2 GiB); least recently used entries are evicted first.
    """
    if max_bytes is None:
        max_bytes = int(os.environ.get(ENV_MAX_BYTES, DEFAULT_MAX_BYTES))
    _state["cache"] = None if path is None else CompilationCache(path, max_bytes)
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
        try:
            set_cache_dir(os.environ.get(ENV_DIR) or None)
        except (OSError, ValueError) as e:
            warnings.warn(f"hlopt: {ENV_DIR}/{ENV_MAX_BYTES} unusable, compiling without a cache: {e}",
                          stacklevel=2)
            set_cache_dir(None)
    return _state["cache"]


def cache_info() -> CacheInfo:
    """Hits and misses of this process, and the entries and size of the cache directory."""
    cache = active_cache()
    if cache is None:
        return CacheInfo(None, 0, 0, 0, 0, 0)
    return cache.info()


def stripped_bytecode(module_bytecode: bytes) -> bytes:
    """The module's bytecode with every debug location replaced by `unknown`."""
    module = parse_module(module_bytecode)
    with module.context:
        passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(module.operation)
    return module_to_bytecode(module)


def cache_key(module_bytecode: bytes, options: xc.CompileOptions, client: Any) -> str:
    """The SHA-256 naming the executable that compiling this module with `options` gives."""
    h = hashlib.sha256()
    for part in (
        b"hlopt-cache-key-v1",
        stripped_bytecode(module_bytecode),
        options.SerializeAsString(),
        client.platform.encode(),
        client.platform_version.encode(),
        jax.__version__.encode(),
        jaxlib.__version__.encode(),
        os.environ.get("XLA_FLAGS", "").encode(),
        f"{jax.process_index()}/{jax.process_count()}".encode(),
    ):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def compile_cached(module_bytecode: bytes, devices: Sequence[jax.Device], options: xc.CompileOptions) -> Any:
    """Compile through the persistent cache when one is set, else directly."""
    client = get_client()
    cache = active_cache()
    if cache is None:
        return compile_with_options(module_bytecode, devices, options, client)
    key = cache_key(module_bytecode, options, client)
    serialized = cache.get(key)
    if serialized is not None:
        try:
            executable = load_executable(serialized, devices, options, client)
        except Exception:  # noqa: BLE001 - an entry PJRT cannot load is a miss, and is replaced
            executable = None
        if executable is not None:
            cache.record(hit=True)
            return executable
    cache.record(hit=False)
    executable = compile_with_options(module_bytecode, devices, options, client)
    try:
        cache.put(key, client.serialize_executable(executable))
    except OSError as e:  # a full or read-only disk costs the entry, not the compilation
        warnings.warn(f"hlopt: cannot write to the compilation cache {cache.directory}: {e}", stacklevel=2)
    return executable
