"""The error every refusal of an executable file, cache entry, key or input raises, and the line
hlopt's warnings point at."""

from __future__ import annotations

import sys
import warnings

from hlopt.passes.ir.locations import in_library


class ExecutableFileError(ValueError):
    """A file (or bytes) that is not a valid hlopt executable: damaged, forged, foreign or unauthenticated.

    Also a key hlopt refuses (`KeyFileError`) and an input `hlopt run` refuses.

    Example:
      >>> import hlopt
      >>> try:
      ...     hlopt.deserialize(b"not an executable")
      ... except hlopt.ExecutableFileError:
      ...     print("refused")
      refused
    """

    __module__ = "hlopt"  # raised and printed as users import it


def warn_in_user_code(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn with `message`, attributed to the innermost calling line outside hlopt and jax (the user's
    `hlopt.load(...)`, not a frame of hlopt's or jax's own), as jax attributes its warnings; to the caller
    when every frame is a library's."""
    frame, level = sys._getframe(1), 1
    while frame is not None and in_library(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level + 1 if frame is not None else 2)
