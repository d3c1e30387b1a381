"""Files that survive a crash: fsync, and a whole-file replace that readers see whole.

Used where a process killed at any moment must leave the old content or the
new one: the batch store's ``CURRENT`` pointer (``batch_layer.publish``) and
the speed checkpoint's record of its view settings (``speed_layer.checkpoint``).
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: Path) -> None:
    """Flush a file's or a directory's entry to disk (a directory: after a rename in it)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def replace_atomically(target: Path, text: str) -> None:
    """Write text to target so that readers see the old content or the new, never a part."""
    temporary = target.with_name(f".{target.name}.tmp")
    with temporary.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(target)
    fsync_path(target.parent)
