"""Whether a directory can be made and written where it is asked for: one rule for every
directory the package writes (a run's, a merged run's, a comparison's)."""

from __future__ import annotations

import os
from pathlib import Path


def directory_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a directory written here, or None: as a person reads it. Only
    what the file system shows before anything is made (a file in the way, a folder that is not
    writable); making it may still fail (a read-only mount, /proc)."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        if existing == path:
            return f"{path} is a file, not a directory"
        return f"{path} cannot be made: {existing} is a file, not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{path} cannot be written: {existing} is not writable"
    return None
