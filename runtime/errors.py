"""The error every refusal of an executable file, cache entry, key or input raises."""

from __future__ import annotations


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
