"""The authenticated container of executable files and cache entries.

Layout (little-endian):

    magic      8 bytes   b"HLOPT\\x00EX"
    version    u32       FORMAT_VERSION
    length     u64       length of the manifest
    total      u64       length of the whole container
    mac        32 bytes  HMAC-SHA256, under the user's key, of the 28 bytes above and the manifest
    manifest   JSON (UTF-8): {"format": ..., "format_version": ..., ...,
                              "sections": [{"name", "size", "sha256"}, ...]}
    sections   their bytes, in the order the manifest lists them

The manifest holds the SHA-256 of every section, so the MAC authenticates
the whole container: header, manifest and every section. Reading is
bounded: only regular files are opened (never a FIFO or a device), and the
magic, the version and every size are checked against the real size before
a body is read. Nothing in a container is imported or evaluated.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import stat
import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from hlopt.runtime.errors import ExecutableFileError
from hlopt.runtime.keys import Key
from hlopt.runtime.paths import file_kind

__all__ = ["Container", "ExecutableFileError", "pack", "read_bytes", "read_path"]

MAGIC = b"HLOPT\x00EX"
# 2: a MAC under the user's key over header and manifest. 3: pytree node classes registered with
# jax.export (hlopt.sparse's BCOO and BCSR) recorded by their serialized name and aux data, and others
# by module:qualname (version 2 recorded BCOO as a node named "hlopt.sparse.BCOO" with static aux data).
FORMAT_VERSION = 3
HEADER = struct.Struct("<8sIQQ32s")
_SIGNED = HEADER.size - 32  # the header bytes the MAC covers
MAX_MANIFEST_BYTES = 64 << 20
# Serialized PJRT executables and StableHLO artifacts are protocol buffers or
# bytecode that XLA cannot hold beyond 2 GiB.
MAX_SECTION_BYTES = (1 << 31) - 1
_CHUNK = 64 << 20  # pread at most this much at once


# which sections to read, given whether the MAC verified
Wanted = Callable[[bool], Collection[str]]


@dataclasses.dataclass
class Container:
    """What `read` found: the manifest, the sections asked for, and whether the MAC verified."""

    manifest: dict[str, Any]
    sections: dict[str, bytes]
    authenticated: bool
    size: int


def pack(manifest: dict[str, Any], sections: dict[str, bytes], key: Key) -> bytes:
    """The container holding `manifest` (plus a section table) and `sections`, MAC'd with `key`."""
    manifest = dict(manifest, format_version=FORMAT_VERSION, sections=[
        {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in sections.items()
    ])
    text = json.dumps(manifest, sort_keys=True, allow_nan=False).encode()
    total = HEADER.size + len(text) + sum(len(d) for d in sections.values())
    prefix = HEADER.pack(MAGIC, FORMAT_VERSION, len(text), total, bytes(32))[:_SIGNED]
    return b"".join([prefix, key.mac(prefix, text), text, *sections.values()])


class _Source:
    """Bytes or an open regular file, read by offset."""

    def __init__(self, data: bytes | None = None, fd: int | None = None, size: int = 0):
        self.data = memoryview(data) if data is not None else None
        self.fd = fd
        self.size = len(data) if data is not None else size

    def read(self, offset: int, n: int) -> bytes:
        if self.data is not None:
            return bytes(self.data[offset : offset + n])
        chunks = []
        while n > 0:
            chunk = os.pread(self.fd, min(n, _CHUNK), offset)
            if not chunk:
                break  # the file shrank while being read: the size checks below catch it
            chunks.append(chunk)
            offset += len(chunk)
            n -= len(chunk)
        return b"".join(chunks)


def read_bytes(data: bytes, source: str, fmt: str, section_names: Sequence[str], key: Key | None,
               wanted: Wanted | None = None, magics: Mapping[str, bytes] | None = None) -> Container:
    """`read` of a container held in memory."""
    return _read(_Source(data=data), source, fmt, section_names, key, wanted, magics or {})


def read_path(path: str | os.PathLike, source: str, fmt: str, section_names: Sequence[str], key: Key | None,
              wanted: Wanted | None = None, magics: Mapping[str, bytes] | None = None, *,
              follow_symlinks: bool = True) -> Container:
    """`read` of the regular file at `path`; anything else (FIFO, device, folder) is refused unread."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise ExecutableFileError(f"cannot read '{source}': {e.strerror}") from None
    except ValueError as e:  # a NUL in the path
        raise ExecutableFileError(f"cannot read {source!r}: {e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ExecutableFileError(f"{source}: not a regular file ({file_kind(st.st_mode)}); "
                                      "executables are read from regular files only")
        try:
            return _read(_Source(fd=fd, size=st.st_size), source, fmt, section_names, key, wanted, magics or {})
        except OSError as e:
            raise ExecutableFileError(f"cannot read '{source}': {e.strerror}") from None
        except MemoryError:
            raise ExecutableFileError(f"{source}: not enough memory to read it ({st.st_size} bytes)") from None
    finally:
        os.close(fd)


def _read(src: _Source, source: str, fmt: str, section_names: Sequence[str], key: Key | None,
          wanted: Wanted | None, magics: Mapping[str, bytes]) -> Container:
    """The checked manifest and the sections `wanted(authenticated)` names (all if None).

    Whether the MAC verifies under `key` is reported, not enforced: `wanted`,
    called as soon as that is known (before the manifest is parsed), decides
    which sections are worth reading, or raises to refuse the container. A
    section named in `magics` must start with those bytes, checked before its
    body is read. Raises ExecutableFileError.
    """

    def fail(message: str) -> ExecutableFileError:
        return ExecutableFileError(f"{source}: {message}")

    head = src.read(0, HEADER.size)
    if len(head) < len(MAGIC) or head[: len(MAGIC)] != MAGIC:
        raise fail(f"not an hlopt file (it starts with {head[:8]!r}, hlopt files with {MAGIC!r})")
    if len(head) < 12:
        raise fail(f"truncated: {src.size} bytes, shorter than the {HEADER.size}-byte header")
    version = int.from_bytes(head[8:12], "little")
    if version != FORMAT_VERSION:
        hint = "; it was written by an older hlopt: compile it again" if version < FORMAT_VERSION else ""
        raise fail(f"format version {version}, but this hlopt reads version {FORMAT_VERSION}{hint}")
    if len(head) < HEADER.size:
        raise fail(f"truncated: {src.size} bytes, shorter than the {HEADER.size}-byte header")
    _, _, length, total, mac = HEADER.unpack(head)
    if length > MAX_MANIFEST_BYTES:
        raise fail(f"the header claims a {length}-byte manifest (at most {MAX_MANIFEST_BYTES}); the file is damaged")
    if total < src.size:
        raise fail(f"{src.size - total} unexpected bytes after the last section")
    if src.size < HEADER.size + length:
        raise fail(f"truncated: the manifest needs {length} bytes but the file ends after {src.size - HEADER.size}")
    if total > src.size:
        raise fail(f"truncated: the header says {total} bytes, the file has {src.size}")
    text = src.read(HEADER.size, length)
    authenticated = key is not None and hmac.compare_digest(key.mac(head[:_SIGNED], text), mac)
    names = list(section_names) if wanted is None else [n for n in section_names if n in wanted(authenticated)]
    try:
        manifest = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise fail(f"the manifest is not valid JSON: {_first_line(e)}") from None
    if not isinstance(manifest, dict):
        raise fail("the manifest is not a JSON object")
    if manifest.get("format") != fmt:
        raise fail(f"this is a {_short(manifest.get('format'))} file, expected {fmt!r}")
    if manifest.get("format_version") != version:
        raise fail(f"the manifest says format version {_short(manifest.get('format_version'))} "
                   f"but the header says {version}")
    table = manifest.get("sections")
    if not (isinstance(table, list) and all(isinstance(s, dict) for s in table)
            and [s.get("name") for s in table] == list(section_names)):
        names = [s.get("name") for s in table] if isinstance(table, list) and all(isinstance(s, dict) for s in table) \
            else None
        raise fail(f"the section table lists {_short(names)}, expected {list(section_names)}")
    offset, spans = HEADER.size + length, {}
    for entry in table:
        name, size, digest = entry["name"], entry.get("size"), entry.get("sha256")
        if type(size) is not int or not 0 <= size <= MAX_SECTION_BYTES or not _is_sha256(digest):
            raise fail(f"section '{name}': malformed size or checksum in the manifest")
        if offset + size > total:
            raise fail(f"truncated: section '{name}' needs {size} bytes but only {total - offset} remain")
        spans[name] = (offset, size, digest)
        offset += size
    if offset != total:
        raise fail(f"{total - offset} unexpected bytes after the last section")
    sections = {}
    for name in names:
        start, size, digest = spans[name]
        magic = magics.get(name, b"")
        if src.read(start, len(magic)) != magic:
            raise fail(f"section '{name}' does not start as it must ({magic!r})")
        body = src.read(start, size)
        if len(body) != size or hashlib.sha256(body).hexdigest() != digest:
            raise fail(f"section '{name}' checksum mismatch: the file is damaged or was edited")
        sections[name] = body
    return Container(manifest, sections, authenticated, src.size)


def _is_sha256(digest: Any) -> bool:
    return isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else type(e).__name__


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")
