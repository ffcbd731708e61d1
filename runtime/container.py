"""The checksummed container of executable files and cache entries.

Layout (little-endian):

    magic      8 bytes   b"HLOPT\\x00EX"
    version    u32       FORMAT_VERSION
    length     u64       length of the manifest
    checksum   32 bytes  SHA-256 of the manifest
    manifest   JSON (UTF-8): {"format": ..., "format_version": ..., ...,
                              "sections": [{"name", "size", "sha256"}, ...]}
    sections   their bytes, in the order the manifest lists them

Unpacking checks the magic, the version, every size and every checksum
before it returns anything; nothing in the file is imported or evaluated.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from typing import Any

MAGIC = b"HLOPT\x00EX"
FORMAT_VERSION = 1
HEADER = struct.Struct("<8sIQ32s")
MAX_MANIFEST_BYTES = 64 << 20


class ExecutableFileError(ValueError):
    """A file (or bytes) that is not a valid hlopt executable: damaged, forged or foreign."""


def pack(manifest: dict[str, Any], sections: dict[str, bytes]) -> bytes:
    """The container holding `manifest` (plus a section table) and `sections`, in order."""
    manifest = dict(manifest, format_version=FORMAT_VERSION, sections=[
        {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in sections.items()
    ])
    text = json.dumps(manifest, sort_keys=True, allow_nan=False).encode()
    header = HEADER.pack(MAGIC, FORMAT_VERSION, len(text), hashlib.sha256(text).digest())
    return b"".join([header, text, *sections.values()])


def unpack(data: bytes, source: str, fmt: str, section_names: Sequence[str]) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and sections of a container of kind `fmt`; raises ExecutableFileError."""

    def fail(message: str) -> ExecutableFileError:
        return ExecutableFileError(f"{source}: {message}")

    data = memoryview(data)
    if len(data) < len(MAGIC) or bytes(data[: len(MAGIC)]) != MAGIC:
        raise fail(f"not an hlopt file (it starts with {bytes(data[:8])!r}, hlopt files with {MAGIC!r})")
    if len(data) < HEADER.size:
        raise fail(f"truncated: {len(data)} bytes, shorter than the {HEADER.size}-byte header")
    _, version, length, checksum = HEADER.unpack_from(data)
    if version != FORMAT_VERSION:
        raise fail(f"format version {version}, but this hlopt reads version {FORMAT_VERSION}")
    if length > MAX_MANIFEST_BYTES:
        raise fail(f"the header claims a {length}-byte manifest (at most {MAX_MANIFEST_BYTES}); the file is damaged")
    if len(data) < HEADER.size + length:
        raise fail(f"truncated: the manifest needs {length} bytes but the file ends after {len(data) - HEADER.size}")
    text = bytes(data[HEADER.size : HEADER.size + length])
    if hashlib.sha256(text).digest() != checksum:
        raise fail("manifest checksum mismatch: the file is damaged or was edited")
    try:
        manifest = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise fail(f"the manifest is not valid JSON: {e}") from None
    if not isinstance(manifest, dict):
        raise fail("the manifest is not a JSON object")
    if manifest.get("format") != fmt:
        raise fail(f"this is a {manifest.get('format')!r} file, expected {fmt!r}")
    if manifest.get("format_version") != version:
        raise fail(f"the manifest says format version {manifest.get('format_version')!r} "
                   f"but the header says {version}")
    table = manifest.get("sections")
    names = [s.get("name") for s in table] if isinstance(table, list) and all(isinstance(s, dict) for s in table) else None
    if names != list(section_names):
        raise fail(f"the section table lists {names}, expected {list(section_names)}")
    sections, offset = {}, HEADER.size + length
    for entry in table:
        name, size, digest = entry["name"], entry.get("size"), entry.get("sha256")
        if type(size) is not int or size < 0 or not isinstance(digest, str):
            raise fail(f"section '{name}': malformed size or checksum in the manifest")
        if offset + size > len(data):
            raise fail(f"truncated: section '{name}' needs {size} bytes but only {len(data) - offset} remain")
        body = bytes(data[offset : offset + size])
        if hashlib.sha256(body).hexdigest() != digest:
            raise fail(f"section '{name}' checksum mismatch: the file is damaged or was edited")
        sections[name] = body
        offset += size
    if offset != len(data):
        raise fail(f"{len(data) - offset} unexpected bytes after the last section")
    return manifest, sections


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")
