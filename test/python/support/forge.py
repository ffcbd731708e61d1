"""What an attacker can do to executable files and cache entries, for the security tests.

An attacker without the user's key can read any file, edit its manifest and
sections, and recompute every checksum that needs no key; the MAC they can
only make under a key of their own (`forge`). `resign` is the user's own
hlopt writing the same edit (a key holder), to test the checks behind the MAC.
`patch_first_kernel` overwrites the machine code of the first kernel of an
XLA:CPU executable with a payload that creates a marker file when it runs.
"""

from __future__ import annotations

import json
import platform
import struct
from typing import Any

from hlopt.runtime import container, files
from hlopt.runtime.keys import Key, user_key

ATTACKER_KEY = Key(b"an attacker's key, not the user's" * 2, "attacker")


def unpack(data: bytes, fmt: str = files.FORMAT, names: tuple[str, ...] = files.SECTIONS) -> tuple[dict, dict]:
    """A container's manifest and sections, read without any key (as an attacker reads them)."""
    found = container.read_bytes(data, "forge", fmt, names, None, lambda authenticated: names)
    manifest = dict(found.manifest)
    del manifest["sections"]
    return manifest, found.sections


def forge(manifest: dict[str, Any], sections: dict[str, bytes]) -> bytes:
    """A container with every checksum recomputed and a MAC under the attacker's key."""
    return container.pack(manifest, sections, ATTACKER_KEY)


def resign(manifest: dict[str, Any], sections: dict[str, bytes]) -> bytes:
    """The same, MAC'd with the user's key: what a key holder (or hlopt itself) writes."""
    return container.pack(manifest, sections, user_key())


def retag(artifact: bytes, signature: dict[str, Any]) -> bytes:
    """The module section with the signature it records replaced (as a forger who knows the format does)."""
    from hlopt.passes.mlir import deserialize_portable_artifact, ir, serialize_portable_artifact

    module = deserialize_portable_artifact(artifact)
    with module.context:
        module.operation.attributes[files.SIGNATURE_ATTR] = ir.StringAttr.get(json.dumps(signature, sort_keys=True))
    return serialize_portable_artifact(module)


def forge_head(manifest: dict[str, Any], table: list[dict[str, Any]], key: Key = ATTACKER_KEY) -> bytes:
    """Header and manifest with a section table of the forger's choosing; the caller writes the bodies."""
    text = json.dumps(dict({"format_version": container.FORMAT_VERSION}, **manifest, sections=table),
                      sort_keys=True).encode()
    total = container.HEADER.size + len(text) + sum(s["size"] for s in table)
    prefix = container.HEADER.pack(container.MAGIC, container.FORMAT_VERSION, len(text), total, bytes(32))[:28]
    return prefix + key.mac(prefix, text) + text


def table(data: bytes) -> list[dict[str, Any]]:
    """The section table of a container."""
    start, end = layout(data)["manifest"]
    return json.loads(data[start:end])["sections"]


def layout(data: bytes) -> dict[str, tuple[int, int]]:
    """Byte ranges of the header, the manifest and each section."""
    _, _, length, _, _ = container.HEADER.unpack_from(data)
    ranges = {"header": (0, container.HEADER.size),
              "manifest": (container.HEADER.size, container.HEADER.size + length)}
    offset = container.HEADER.size + length
    for s in json.loads(data[container.HEADER.size : offset])["sections"]:
        ranges[s["name"]] = (offset, offset + s["size"])
        offset += s["size"]
    assert offset == len(data)
    return ranges


def payload_x86_64(marker: str) -> bytes:
    """x86-64 Linux code that creates `marker` (open with O_CREAT) and returns 0 (a kernel's success)."""
    path = marker.encode() + b"\0"
    code = bytes.fromhex(
        "488d3d14000000"  # lea rdi, [rip + 20]: the path after this code
        "be41000000"      # mov esi, O_WRONLY | O_CREAT
        "baa4010000"      # mov edx, 0644
        "b802000000"      # mov eax, SYS_open
        "0f05"            # syscall
        "31c0"            # xor eax, eax
        "c3"              # ret
    )
    return code + path


def can_patch_kernels() -> bool:
    return platform.machine() in ("x86_64", "AMD64")


def patch_first_kernel(executable: bytes, marker: str) -> bytes:
    """`executable` (an XLA:CPU serialized executable) with its first kernel replaced by the payload.

    The kernel's first bytes become a jump to the payload, placed where the
    loader's relocations do not write.
    """
    blob = bytearray(executable)
    payload = payload_x86_64(marker)
    for offset, size, relocated in _kernels(bytes(blob)):
        if any(r < 5 for r in relocated):
            continue
        for at in range(8, size - len(payload)):
            if all(not at - 8 < r < at + len(payload) for r in relocated):
                blob[offset : offset + 5] = b"\xe9" + (at - 5).to_bytes(4, "little", signed=True)
                blob[offset + at : offset + at + len(payload)] = payload
                return bytes(blob)
    raise AssertionError("no kernel large enough for the payload")


def _kernels(blob: bytes) -> list[tuple[int, int, set[int]]]:
    """(offset in blob, size, offsets the loader relocates) of each function in each ELF object of blob."""
    found, start = [], 0
    while (i := blob.find(b"\x7fELF", start)) >= 0:
        start = i + 4
        elf = blob[i:]
        (shoff,) = struct.unpack_from("<Q", elf, 40)
        shentsize, shnum = struct.unpack_from("<HH", elf, 58)
        sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + k * shentsize) for k in range(shnum)]
        relocations = [(s[7], struct.unpack_from("<Q", elf, s[4] + j * 24)[0])
                       for s in sections if s[1] == 4 for j in range(s[5] // 24)]  # SHT_RELA: (target section, offset)
        for s in sections:
            if s[1] != 2:  # SHT_SYMTAB
                continue
            for j in range(s[5] // 24):
                _, info, _, shndx, value, size = struct.unpack_from("<IBBHQQ", elf, s[4] + j * 24)
                if info & 0xF == 2 and size > 0:  # STT_FUNC
                    relocated = {off - value for target, off in relocations if target == shndx and value <= off < value + size}
                    found.append((i + sections[shndx][4] + value, size, relocated))
    return found
