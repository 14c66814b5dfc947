"""Topic names, wildcard patterns and an index that finds every pattern matching a topic.

Names
    A topic name is a ``str`` of 1 to 200 ASCII characters with no whitespace at either end and
    no ``#``; a concrete name also has no ``*``. Names compare case-insensitively:
    ``normalize(name)`` (lower case) is the key everywhere.

Segments
    ``.`` and ``/`` are the same separator, so ``a.b``, ``a/b`` and ``A/B`` are matched alike
    (``normalize`` keeps the separators, so they stay distinct topic *keys*). A name is split at
    every separator with nothing special-cased: a leading separator gives an empty first segment,
    so ``/zato/s/to/*`` matches ``/zato/s/to/crm_x`` and ``.zato.s.to.crm_x`` but never
    ``zato/s/to/crm_x`` (a ``/``-rooted name lives in its own namespace). ``a..b`` and a
    trailing separator give empty segments too, matched literally.

Patterns
    - A ``*`` segment matches exactly one non-empty segment.
    - A ``**`` segment matches any number of segments, zero included (empty ones too):
      ``invoice.**`` matches ``invoice``, ``invoice.emea`` and ``invoice.apac.approved.urgent``;
      ``**.created`` matches ``created`` and ``a.b.created``; ``**`` alone matches everything.
    - ``*`` inside a segment matches any run of characters, possibly empty, within that segment
      only: ``inv*`` matches ``inv`` and ``invoice`` but not ``inv.x``; ``a*b*c`` is fine.
    - ``**`` anywhere but as a whole segment (``a**``, ``***``) is an invalid pattern.
    - Every other character matches itself, case-insensitively. There is no escaping and no
      ``?`` or ``[...]``: those are literal characters.

``matches(pattern, topic)`` is the reference implementation (a dynamic programme over
segments). ``PatternIndex`` answers the same question for many patterns without scanning them:
exact patterns sit in a dict, wildcard patterns in a trie over segments that is walked as a set
of states, so ``**`` costs at most (trie nodes x topic segments), never exponential time.

An index is not locked: callers modify it from one greenlet only (each method is atomic with
respect to gevent, as none of them yields) and may read it from any greenlet.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar

from runtime.errors import InvalidTopicName

T = TypeVar('T')

#: Longest topic name or pattern accepted, in characters.
MAX_NAME_LEN_CHARS = 200



def normalize(name: str) -> str:
    """Return the case-insensitive key of a topic name or pattern."""
    return name.lower()


def is_pattern(s: str) -> bool:
    """Return True if ``s`` contains a wildcard."""
    return '*' in s


def _check(name: object, kind: str, allow_wildcards: bool) -> str:
    if not isinstance(name, str):
        raise InvalidTopicName(name, f'must be a string, not {type(name).__name__}', kind=kind)
    if not name:
        raise InvalidTopicName(name, 'is empty', kind=kind)
    if len(name) > MAX_NAME_LEN_CHARS:
        raise InvalidTopicName(name, f'is longer than {MAX_NAME_LEN_CHARS} characters', kind=kind)
    if not name.isascii():
        raise InvalidTopicName(name, 'is not ASCII', kind=kind)
    if name != name.strip():
        raise InvalidTopicName(name, 'has whitespace at either end', kind=kind)
    if '#' in name:
        raise InvalidTopicName(name, "contains '#'", kind=kind)
    if '*' in name:
        if not allow_wildcards:
            raise InvalidTopicName(name, "contains '*' (wildcards are for patterns only)", kind=kind)
        for seg in _split(name):
            if '**' in seg and seg != '**':
                raise InvalidTopicName(name, "has '**' that is not a whole segment", kind=kind)
    return name


def validate_topic_name(name: object) -> str:
    """Return ``name`` unchanged if it is a valid concrete topic name, else raise InvalidTopicName."""
    return _check(name, 'topic name', False)


def validate_pattern(pattern: object) -> str:
    """Return ``pattern`` unchanged if it is a valid topic pattern, else raise InvalidTopicName."""
    return _check(pattern, 'topic pattern', True)


def _key(name: str) -> str:
    """Normalized name with '/' turned into '.', so equal keys match alike."""
    return name.lower().replace('/', '.')


def _split(name: str) -> list[str]:
    return _key(name).split('.')


def _glob_match(glob: str, seg: str) -> bool:
    """Match one segment against a glob whose only special character is '*' (linear, no regex)."""
    parts = glob.split('*')
    first, last = parts[0], parts[-1]
    if len(seg) < len(first) + len(last) or not seg.startswith(first) or not seg.endswith(last):
        return False
    pos, end = len(first), len(seg) - len(last)
    for part in parts[1:-1]:
        found = seg.find(part, pos, end)
        if found < 0:
            return False
        pos = found + len(part)
    return True


def _seg_match(pat: str, seg: str) -> bool:
    if pat == '*':
        return seg != ''
    if '*' in pat:
        return _glob_match(pat, seg)
    return pat == seg


def matches(pattern: str, topic: str) -> bool:
    """Return True if ``topic`` matches ``pattern`` (reference implementation; validates both)."""
    pat = _split(validate_pattern(pattern))
    top = _split(validate_topic_name(topic))
    n_top = len(top)
    # row[j] is True when pat[i:] matches top[j:]; rows are computed from the last segment back.
    row = [False] * n_top + [True]
    for p in reversed(pat):
        new = [False] * (n_top + 1)
        for j in range(n_top, -1, -1):
            if p == '**':
                new[j] = row[j] or (j < n_top and new[j + 1])
            else:
                new[j] = j < n_top and row[j + 1] and _seg_match(p, top[j])
        row = new
    return row[0]



def _seg_covers(grant: str, seg: str) -> bool:
    """Whether every segment seg can stand for also matches grant (seg may be a glob itself)."""
    if '*' not in seg:
        return _seg_match(grant, seg)
    return grant == '*' or grant == seg  # a glob covers another only trivially: kept conservative


def covers(grant: str, pattern: str) -> bool:
    """Return True if every topic that ``pattern`` matches is also matched by ``grant`` (validates both).

    Sound, not complete: a pattern's ``**`` is covered only by the grant's ``**``, and a glob segment
    (``ord*``) only by ``*`` or by the same glob; when unsure, the answer is False.
    """
    gra = _split(validate_pattern(grant))
    pat = _split(validate_pattern(pattern))
    n_pat = len(pat)
    row = [False] * n_pat + [True]
    for g in reversed(gra):
        new = [False] * (n_pat + 1)
        for j in range(n_pat, -1, -1):
            if g == '**':
                new[j] = row[j] or (j < n_pat and new[j + 1])
            else:
                new[j] = j < n_pat and pat[j] != '**' and row[j + 1] and _seg_covers(g, pat[j])
        row = new
    return row[0]

class _Node:
    """One trie node; edges are pattern segments, ``values`` belong to patterns ending here."""

    __slots__ = ('children', 'star', 'globstar', 'globs', 'values', 'is_globstar')

    def __init__(self, is_globstar: bool = False) -> None:
        self.children: dict[str, _Node] = {}
        self.star: _Node | None = None
        self.globstar: _Node | None = None
        self.globs: dict[str, _Node] = {}
        self.values: set = set()
        self.is_globstar = is_globstar  # reached through '**': loops on any segment

    def is_empty(self) -> bool:
        return not (self.values or self.children or self.star or self.globstar or self.globs)

    def step(self, seg: str) -> _Node | None:
        """Follow the edge for pattern segment ``seg``, if there is one."""
        if seg == '**':
            return self.globstar
        if seg == '*':
            return self.star
        return (self.globs if '*' in seg else self.children).get(seg)

    def add_edge(self, seg: str) -> _Node:
        """Follow the edge for pattern segment ``seg``, adding it if missing."""
        node = self.step(seg)
        if node is None:
            node = _Node(is_globstar=seg == '**')
            if seg == '**':
                self.globstar = node
            elif seg == '*':
                self.star = node
            else:
                (self.globs if '*' in seg else self.children)[seg] = node
        return node

    def unlink(self, seg: str) -> None:
        if seg == '**':
            self.globstar = None
        elif seg == '*':
            self.star = None
        else:
            (self.globs if '*' in seg else self.children).pop(seg, None)


def _closure(states: set[_Node]) -> set[_Node]:
    """Add every node reachable through '**' edges without consuming a segment."""
    stack = list(states)
    while stack:
        node = stack.pop()
        nxt = node.globstar
        if nxt is not None and nxt not in states:
            states.add(nxt)
            stack.append(nxt)
    return states


class PatternIndex(Generic[T]):
    """Patterns mapped to values, answering "which values match this topic" without a scan."""

    def __init__(self) -> None:
        self._exact: dict[str, set[T]] = {}
        self._root = _Node()
        self._count = 0
        #: Trie nodes visited by the last ``match`` call (for tests and debugging).
        self._last_visits = 0

    def __len__(self) -> int:
        return self._count

    @property
    def last_visits(self) -> int:
        """Trie nodes the last ``match`` call visited: what a match costs, whatever the number of patterns."""
        return self._last_visits

    def is_empty(self) -> bool:
        """True when nothing is left, not even an empty trie branch (removing prunes them)."""
        return self._root.is_empty() and not self._exact

    def __contains__(self, pattern: object) -> bool:
        try:
            key = _key(validate_pattern(pattern))
        except InvalidTopicName:
            return False
        if not is_pattern(key):
            return key in self._exact
        node = self._find(key)
        return node is not None and bool(node.values)

    def clear(self) -> None:
        """Remove every pattern and value."""
        self._exact.clear()
        self._root = _Node()
        self._count = 0

    def add(self, pattern: str, value: T) -> None:
        """Map ``pattern`` to ``value``; adding the same pair twice keeps one."""
        key = _key(validate_pattern(pattern))
        if is_pattern(key):
            node = self._root
            for seg in key.split('.'):
                node = node.add_edge(seg)
            values = node.values
        else:
            values = self._exact.setdefault(key, set())
        if value not in values:
            values.add(value)
            self._count += 1

    def remove(self, pattern: str, value: T) -> bool:
        """Unmap ``value`` from ``pattern``; return False if it was not mapped."""
        key = _key(validate_pattern(pattern))
        if not is_pattern(key):
            values = self._exact.get(key)
            if not values or value not in values:
                return False
            values.discard(value)
            if not values:
                del self._exact[key]
            self._count -= 1
            return True
        path: list[tuple[_Node, str]] = []
        node = self._root
        for seg in key.split('.'):
            path.append((node, seg))
            nxt = node.step(seg)
            if nxt is None:
                return False
            node = nxt
        if value not in node.values:
            return False
        node.values.discard(value)
        self._count -= 1
        for parent, seg in reversed(path):  # prune the branch that is now empty
            if not node.is_empty():
                break
            parent.unlink(seg)
            node = parent
        return True

    def match(self, topic: str) -> set[T]:
        """Return every value whose pattern matches ``topic`` (validated as a concrete name)."""
        key = _key(validate_topic_name(topic))
        found: set[T] = set(self._exact.get(key, ()))
        root = self._root
        if root.is_empty():
            self._last_visits = 0
            return found
        states = _closure({root})
        visits = len(states)
        for seg in key.split('.'):
            nxt: set[_Node] = set()
            for node in states:
                if node.is_globstar:
                    nxt.add(node)
                child = node.children.get(seg)
                if child is not None:
                    nxt.add(child)
                if node.star is not None and seg:
                    nxt.add(node.star)
                for glob, child in node.globs.items():
                    if _glob_match(glob, seg):
                        nxt.add(child)
            if not nxt:
                self._last_visits = visits
                return found
            states = _closure(nxt)
            visits += len(states)
        for node in states:
            found |= node.values
        self._last_visits = visits
        return found

    def _find(self, key: str) -> _Node | None:
        node: _Node | None = self._root
        for seg in key.split('.'):
            node = node.step(seg)
            if node is None:
                break
        return node


def matching_names(pattern: str, names: Iterable[str], limit: int, offset: int = 0) -> tuple[int, list[str]]:
    """(how many of names the pattern matches, those from the offset-th, at most limit), in the order given.

    The pattern is validated once (InvalidTopicName if it is not one) and matched through a
    ``PatternIndex``, as publications are; a name that is not a valid topic name matches nothing.
    """
    index: PatternIndex[bool] = PatternIndex()
    index.add(pattern, True)
    total, page = 0, []
    for name in names:
        try:
            if not index.match(name):
                continue
        except InvalidTopicName:
            continue
        if offset <= total < offset + limit:
            page.append(name)
        total += 1
    return total, page
