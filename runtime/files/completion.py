"""When a file in a polled directory is complete, so that a half-written file is never taken.

Two rules, one per channel (``complete_when``):

- ``stable``: the file's size and mtime are the same in ``stable_polls`` consecutive listings after
  the one it first appeared in. A file seen for the first time is never complete, so
  ``stable_polls=1`` means "unchanged between two polls". Any change starts the count again.
- ``marker``: the sender drops a companion file ``<path><marker_suffix>`` (``a.csv.done``) once
  ``a.csv`` is complete. A file is complete as soon as its marker is in the same listing. Every name
  ending with the suffix is a marker, and markers themselves are never returned.

``Completion.update`` must be given the whole listing of the directory (not only the files that
match the channel's patterns), or markers that do not match the patterns would never be seen. It
forgets files that are no longer listed; ``forget`` drops one explicitly (after the poller has
claimed or given up on it), so that a file of the same name dropped later starts afresh.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from runtime.files.source_base import Entry

#: The rules ``complete_when`` may name.
MODES = ('stable', 'marker')


@dataclass
class _Seen:
    size: int
    mtime: float
    unchanged: int  # consecutive listings since the last change


class Completion:
    """Which listed files are complete now, by stability over polls or by marker files."""

    def __init__(self, mode: str, stable_polls: int = 2, marker_suffix: str = '.done') -> None:
        if mode not in MODES:
            raise ValueError(f'complete_when must be one of {", ".join(MODES)}, not {mode!r}')
        if mode == 'stable' and (isinstance(stable_polls, bool) or not isinstance(stable_polls, int)
                                 or stable_polls < 1):
            raise ValueError(f'stable_polls must be a whole number of at least 1, not {stable_polls!r}')
        if mode == 'marker' and (not marker_suffix or '/' in marker_suffix):
            raise ValueError(f'marker_suffix must be a non-empty name suffix without "/", not {marker_suffix!r}')
        self.mode = mode
        self.stable_polls = stable_polls
        self.marker_suffix = marker_suffix
        self._seen: dict[str, _Seen] = {}

    def update(self, entries: Iterable[Entry]) -> list[Entry]:
        """The entries of this listing that are complete now, in listing order."""
        entries = list(entries)
        if self.mode == 'marker':
            return self._by_marker(entries)
        return self._by_stability(entries)

    def forget(self, path: str) -> None:
        """Drop what is known about path: if it is listed again, it counts as new."""
        self._seen.pop(path, None)

    def _by_stability(self, entries: list[Entry]) -> list[Entry]:
        seen: dict[str, _Seen] = {}
        complete = []
        for entry in entries:
            before = self._seen.get(entry.path)
            if before is not None and before.size == entry.size and before.mtime == entry.mtime:
                now = _Seen(entry.size, entry.mtime, before.unchanged + 1)
            else:
                now = _Seen(entry.size, entry.mtime, 0)
            seen[entry.path] = now
            if now.unchanged >= self.stable_polls:
                complete.append(entry)
        self._seen = seen
        return complete

    def _by_marker(self, entries: list[Entry]) -> list[Entry]:
        paths = {entry.path for entry in entries}
        suffix = self.marker_suffix
        return [entry for entry in entries
                if not entry.path.endswith(suffix) and entry.path + suffix in paths]
