"""Locations resolved as Hadoop resolves them, and whether one lies below its root.

Spark hands every location it is given (``LOCATION '...'``, ``OPTIONS (path ...)``, a stream's
checkpoint, what VACUUM deletes) to Hadoop's ``org.apache.hadoop.fs.Path``, and the file system
then opens what that ``Path`` names. So a location is judged on Hadoop's reading of it, not on a
URL parser's: :func:`hadoop_path` is a port of ``new Path(String)`` on a POSIX machine, held to
Hadoop's own results by the tests (the job asks Hadoop itself, through the JVM). Hadoop's reading
differs from a URL's in ways that matter:

* ``?`` and ``#`` are characters of the path, not the start of a query or a fragment, and ``..``
  after them still climbs: ``<root>/x?/../../..`` leaves the root;
* ``%`` is a character too: ``%2e%2e`` names a directory called ``%2e%2e``. Some readers decode it,
  so a location must lie below its root in both readings;
* ``//`` collapses, a trailing ``/`` is dropped, and ``.`` and ``..`` segments are removed as
  ``java.net.URI.normalize`` removes them (a ``..`` that cannot climb further stays, and is refused).

A local location (no scheme, or ``file``) must also lie below its root once symbolic links are
followed, as the operating system will follow them. See docs/validation.md.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

#: A URI scheme, as ``java.net.URI`` accepts one.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
_SEGMENT = re.compile(r"([^/]+)(/+)?")
_SLASHES = re.compile(r"/{2,}")


class PathError(ValueError):
    """A location Hadoop refuses to read as a ``Path`` (``IllegalArgumentException``)."""


@dataclass(frozen=True)
class HadoopPath:
    """What ``new Path(text).toUri()`` gives: scheme and authority (None when absent) and the
    decoded path (``getPath()``), which is what the file system opens."""

    scheme: str | None
    authority: str | None
    path: str

    @property
    def absolute(self) -> bool:
        return self.path.startswith("/")


def hadoop_path(text: str) -> HadoopPath:
    """``new org.apache.hadoop.fs.Path(text)`` on a POSIX machine; :class:`PathError` where Hadoop
    throws."""
    if not text:
        raise PathError("Can not create a Path from an empty string")
    scheme: str | None = None
    start = 0
    colon, slash = text.find(":"), text.find("/")
    if colon != -1 and (slash == -1 or colon < slash):
        scheme, start = text[:colon], colon + 1
    authority: str | None = None
    if text.startswith("//", start) and len(text) - start > 2:
        next_slash = text.find("/", start + 2)
        end = next_slash if next_slash > 0 else len(text)
        authority, start = text[start + 2 : end], end
    path = _hadoop_normalize(text[start:])
    if scheme is not None and not _SCHEME.fullmatch(scheme):
        raise PathError(f"Illegal character in scheme name: {text}")
    if scheme is not None and path and not path.startswith("/"):
        raise PathError(f"Relative path in absolute URI: {text}")
    if scheme is not None and authority is None and not path:
        raise PathError(f"Expected scheme-specific part: {text}")
    if authority and path and not path.startswith("/"):  # pragma: no cover - a path after an authority starts with /
        raise PathError(f"Relative path with an authority: {text}")
    if not authority and path.startswith("//"):
        raise PathError(f"a path that a URI would read as an authority: {text}")
    return HadoopPath(scheme, authority or None, uri_normalize(path))


def _hadoop_normalize(path: str) -> str:
    """``Path.normalizePath``: every run of ``/`` made one (``///`` too, as Hadoop's own results
    show), then a trailing ``/`` dropped from a path longer than ``/``."""
    path = _SLASHES.sub("/", path)
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    return path


def uri_normalize(path: str) -> str:
    """``java.net.URI.normalize`` of a path: redundant slashes, ``.`` segments and each segment
    followed by ``..`` removed; a ``..`` with nothing left to remove stays."""
    if not _needs_normalization(path):
        return path
    absolute = path.startswith("/")
    segments = [(m.group(1), m.group(2) is not None) for m in _SEGMENT.finditer(path)]  # (segment, slash after)
    kept: list[tuple[str, bool]] = []
    for segment in segments:
        if segment[0] == ".":
            continue
        if segment[0] == ".." and kept and kept[-1][0] != "..":
            kept.pop()
            continue
        kept.append(segment)
    if not absolute and kept and ":" in kept[0][0]:
        kept.insert(0, (".", True))  # java.net.URI keeps a relative path from reading as a scheme
    return ("/" if absolute else "") + "".join(seg + ("/" if slash else "") for seg, slash in kept)


def _needs_normalization(path: str) -> bool:
    stripped = path.lstrip("/")
    if len(path) - len(stripped) > 1 or "//" in stripped:
        return True
    return any(segment in (".", "..") for segment in stripped.split("/"))


# -- below a root ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Place:
    """A location as the file system opens it: scheme and authority lower-cased, an absolute path
    with no ``.``/``..`` segment and no trailing slash (``/`` alone for the root of a file system)."""

    scheme: str
    authority: str
    path: str

    def contains(self, other: Place) -> bool:
        """Whether ``other`` lies strictly below this place."""
        if (other.scheme, other.authority) != (self.scheme, self.authority) or other.path == self.path:
            return False
        prefix = self.path.rstrip("/") + "/"
        return other.path.startswith(prefix)


#: How a location without a scheme is read: Hadoop's default file system, local here.
DEFAULT_SCHEME = "file"


def place_of(resolved: HadoopPath) -> Place | None:
    """The place a resolved location names; None when it is relative or still climbs (``/..``)."""
    if not resolved.absolute:
        return None
    path = resolved.path.rstrip("/") or "/"
    if any(segment in (".", "..") for segment in path.split("/")):
        return None
    scheme = (resolved.scheme or DEFAULT_SCHEME).lower()
    return Place(scheme, (resolved.authority or "").lower(), path)


def local_place(location: str) -> Place | None:
    """The place Hadoop reads ``location`` as, with ``file`` as the default file system; None
    when Hadoop refuses it, or it is relative or climbs above its file system's root."""
    try:
        return place_of(hadoop_path(location))
    except PathError:
        return None


Resolver = Callable[[str], "Place | None"]


#: The characters that make Spark read a path as a glob (``SparkHadoopUtil.isGlobPath``), which it
#: then expands: there ``\\`` escapes the next character, so ``<root>/\\../x`` is read as ``..``
#: and leaves the root, though no reading of the path as a path has a ``..`` segment.
GLOB_CHARACTERS = frozenset("{}[]*?\\")


def has_glob(location: str) -> bool:
    """Whether Spark would expand ``location`` as a glob (it is then never below a root)."""
    return any(character in GLOB_CHARACTERS for character in location)


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control character (NUL, a line break, DEL, ...), in its own reading or
    %-decoded: no file system path holds one on purpose, and the operating system refuses a NUL."""
    return any(unicodedata.category(c) == "Cc" for c in text + unquote(text))


def shown_location(location: str) -> str:
    """``location`` as a refusal shows it: each control character escaped (``\\u0000``), and
    saying so."""
    if not has_control(location):
        return location
    escaped = "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) == "Cc" else c for c in location)
    return f"{escaped}, which holds a control character"


def is_below(location: str, root: str, resolve: Resolver | None = None) -> bool:
    """Whether ``location`` lies strictly below ``root`` (the root itself is not below it), in
    Hadoop's reading, in the %-decoded reading, and, for local places, once symbolic links are
    followed; a location Spark would expand as a glob (:func:`has_glob`), or holding a control
    character (:func:`has_control`), never is. ``resolve`` reads a location as the job's Hadoop does (scheme and authority of the
    default file system filled in); by default :func:`hadoop_path` does, with ``file`` as the
    default scheme. A relative location, another scheme or another authority is never below."""
    if not root.strip() or not location.strip() or has_glob(location) or has_control(location + root):
        return False
    reader: Resolver = resolve or local_place
    base = reader(root.strip())
    if base is None:
        return False
    readings = [reader(location)]
    if "%" in location:
        readings.append(reader(unquote(location)))
    for place in readings:
        if place is None or has_control(place.path) or not base.contains(place):
            return False
        if place.scheme == "file" and not _real_place(base).contains(_real_place(place)):
            return False
    return True


def _real_place(place: Place) -> Place:
    """A local place with its symbolic links followed (as far as the path exists)."""
    return Place(place.scheme, place.authority, os.path.realpath(place.path))
