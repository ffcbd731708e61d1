"""The one table of element types: numpy dtype names, MLIR element types, and short names.

Every boundary that names a dtype uses it: executable files and their
manifests (`hlopt.runtime.encoding`), the dtypes a custom partitioner is shown
(`lower-custom-partitioning`), and `hlopt compile --arg f32[8,4]`.
"""

from __future__ import annotations

# numpy dtype name (ml_dtypes' for the narrow floats) -> MLIR element type
DTYPES: dict[str, str] = {
    "bool": "i1",
    "int4": "i4", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint4": "ui4", "uint8": "ui8", "uint16": "ui16", "uint32": "ui32", "uint64": "ui64",
    "float8_e4m3fn": "f8E4M3FN", "float8_e5m2": "f8E5M2",
    "bfloat16": "bf16", "float16": "f16", "float32": "f32", "float64": "f64",
    "complex64": "complex<f32>", "complex128": "complex<f64>",
}

# MLIR element type -> numpy dtype name
DTYPE_NAMES: dict[str, str] = {element: name for name, element in DTYPES.items()}

# short names (XLA's, and i8-style) -> numpy dtype name
SHORT_NAMES: dict[str, str] = {
    "pred": "bool",
    "s4": "int4", "s8": "int8", "s16": "int16", "s32": "int32", "s64": "int64",
    "i4": "int4", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u4": "uint4", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
    "bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64",
    "c64": "complex64", "c128": "complex128",
}


def dtype_name(name: str) -> str | None:
    """The numpy dtype name that `name` (a numpy or short name) stands for, None if none."""
    name = SHORT_NAMES.get(name, name)
    return name if name in DTYPES else None
