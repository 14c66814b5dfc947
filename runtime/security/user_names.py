"""Which user names a security definition may take: no invisible characters, no look-alikes.

A user name must be NFKC-stable (``unicodedata.normalize('NFKC', name) == name``: full-width
``ｃｒｍ`` is refused, its NFKC form ``crm`` is not) and hold no control, format or space character
(zero-width spaces and joiners, tabs, trailing or inner spaces). Its *skeleton* — NFKC, case
folded, then Cyrillic and Greek letters that look like Latin ones mapped to those (``LOOK_ALIKES``)
— must differ from the skeleton of every other definition's user name and of the reserved admin
and viewer names: ``Crm``, ``сrm`` (Cyrillic с) and ``crm`` are one skeleton, so only the first to
be stored is accepted. Names stored before this rule are left as they are and keep working.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from runtime.config import AdminSection, DashboardSection

#: User names no definition may look like: the admin's and the dashboard viewer's (their defaults).
RESERVED_USERNAMES = (AdminSection.username, DashboardSection.viewer_username)


def reserved_usernames(admin: AdminSection, dashboard: DashboardSection) -> tuple[str, ...]:
    """The names a definition may not look like on this server: the configured admin and viewer, and the defaults.

    The defaults stay reserved when other names are configured: a definition called ``admin`` would
    still pass for the admin to anyone who reads a log or an audit line.
    """
    return tuple(dict.fromkeys((admin.username, dashboard.viewer_username, *RESERVED_USERNAMES)))

#: Lower-case Cyrillic and Greek letters drawn like a Latin letter in common fonts (after case folding).
LOOK_ALIKES = str.maketrans({
    # Cyrillic
    'а': 'a', 'в': 'b', 'е': 'e', 'ё': 'e', 'һ': 'h', 'і': 'i', 'ї': 'i', 'ј': 'j', 'к': 'k', 'м': 'm',
    'н': 'h', 'о': 'o', 'р': 'p', 'с': 'c', 'т': 't', 'у': 'y', 'х': 'x', 'ѕ': 's', 'ԁ': 'd', 'ԛ': 'q',
    'ԝ': 'w', 'ӏ': 'l', 'ɡ': 'g',
    # Greek
    'α': 'a', 'β': 'b', 'ε': 'e', 'η': 'n', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'τ': 't',
    'υ': 'u', 'χ': 'x', 'ϲ': 'c', 'ϳ': 'j', 'ζ': 'z',
})

#: Unicode categories refused anywhere in a user name: control, format (zero-width), separators.
REFUSED_CATEGORIES = frozenset({'Cc', 'Cf', 'Cs', 'Co', 'Cn', 'Zs', 'Zl', 'Zp'})


def invisible_problem(name: str) -> str | None:
    """The first control, format or space character of name, named, or None."""
    for ch in name:
        if unicodedata.category(ch) in REFUSED_CATEGORIES or ch.isspace():
            return (f'user name {name!r} contains the invisible or space character U+{ord(ch):04X} '
                    f'({unicodedata.name(ch, "unnamed")})')
    return None


def nfkc_problem(name: str) -> str | None:
    """Why name is not NFKC-stable (with the form to use), or None."""
    normal = unicodedata.normalize('NFKC', name)
    if normal != name:
        return f'user name {name!r} is not in Unicode NFKC form (it normalises to {normal!r}); use {normal!r}'
    return None


def skeleton(name: str) -> str:
    """What name looks like: NFKC, case folded, look-alike letters mapped to Latin ones."""
    return unicodedata.normalize('NFKC', name).casefold().translate(LOOK_ALIKES)


def clash(name: str, others: Iterable[str]) -> str | None:
    """The first of others that looks like name (same skeleton), or None; name itself does not count."""
    own = skeleton(name)
    for other in others:
        if other != name and skeleton(other) == own:
            return other
    return None


def problem(name: str, existing: Iterable[str], reserved: Iterable[str] = ()) -> str | None:
    """Why name cannot be a new or renamed user name beside existing and the reserved names, or None."""
    found = invisible_problem(name)
    if found is not None:
        return found
    kept = clash(name, reserved)
    if kept is not None:
        return f'user name {name!r} looks like the reserved {kept!r}'
    kept = clash(name, existing)
    if kept is not None:
        return f'user name {name!r} looks like the existing {kept!r}'
    # After the clashes: 'ｃｒｍ' beside 'crm' is best told as the clash it is.
    return nfkc_problem(name)
