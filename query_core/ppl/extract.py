"""What ``parse`` and ``grok`` extract: Java regular expressions with named groups, and grok
patterns expanded to such expressions."""

from __future__ import annotations

import re
from dataclasses import dataclass

from query_core.ppl.errors import PplSemanticError

# -- parse and grok ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExtractPattern:
    """A regex without group names, for Spark's ``regexp_extract``, and the named groups' numbers."""

    regex: str
    groups: tuple[tuple[str, int], ...]


_GROUP_START = re.compile(r"\(\?<([A-Za-z][A-Za-z0-9_]*)>")


def named_groups(pattern: str) -> ExtractPattern:
    """The groups ``(?<name>...)`` of a Java regex, numbered as Java numbers capturing groups.

    The names are dropped from the regex: Java only allows letters and digits in group names,
    while the reference takes names like ``client_ip``.
    """
    out: list[str] = []
    groups: list[tuple[str, int]] = []
    number = 0
    i = 0
    in_class = False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            named = _GROUP_START.match(pattern, i)
            if named is not None:
                number += 1
                groups.append((named.group(1), number))
                out.append("(")
                i = named.end()
                continue
            if not pattern.startswith("(?", i):
                number += 1
        out.append(char)
        i += 1
    return ExtractPattern("".join(out), tuple(groups))


#: Grok patterns, by name; ``%{NAME}`` and ``%{NAME:field}`` refer to them.
GROK_PATTERNS: dict[str, str] = {
    "USERNAME": r"[a-zA-Z0-9._-]+",
    "USER": r"%{USERNAME}",
    "EMAILLOCALPART": r"[a-zA-Z0-9!#$%&'*+\-/=?^_`{|}~]+(?:\.[a-zA-Z0-9!#$%&'*+\-/=?^_`{|}~]+)*",
    "EMAILADDRESS": r"%{EMAILLOCALPART}@%{HOSTNAME}",
    "INT": r"[+-]?[0-9]+",
    "BASE10NUM": r"[+-]?(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)",
    "NUMBER": r"%{BASE10NUM}",
    "BASE16NUM": r"[+-]?(?:0x)?[0-9A-Fa-f]+",
    "POSINT": r"\b[1-9][0-9]*\b",
    "NONNEGINT": r"\b[0-9]+\b",
    "WORD": r"\b\w+\b",
    "NOTSPACE": r"\S+",
    "SPACE": r"\s*",
    "DATA": r".*?",
    "GREEDYDATA": r".*",
    "QUOTEDSTRING": r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'",
    "UUID": r"[A-Fa-f0-9]{8}-(?:[A-Fa-f0-9]{4}-){3}[A-Fa-f0-9]{12}",
    "IPV6": r"(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}|(?:[0-9A-Fa-f]{1,4}:){1,7}:|:(?::[0-9A-Fa-f]{1,4}){1,7}"
    r"|(?:[0-9A-Fa-f]{1,4}:){1,6}:[0-9A-Fa-f]{1,4}",
    "IPV4": r"(?<![0-9])(?:(?:25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})\.){3}(?:25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})(?![0-9])",
    "IP": r"%{IPV6}|%{IPV4}",
    "HOSTNAME": r"\b(?:[0-9A-Za-z][0-9A-Za-z-]{0,62})(?:\.(?:[0-9A-Za-z][0-9A-Za-z-]{0,62}))*(?:\.?|\b)",
    "IPORHOST": r"%{IP}|%{HOSTNAME}",
    "HOSTPORT": r"%{IPORHOST}:%{POSINT}",
    "URIPROTO": r"[A-Za-z][A-Za-z0-9+\-.]+",
    "URIPATH": r"(?:/[A-Za-z0-9$.+!*'(){},~:;=@#%&_\-]*)+",
    "URIPARAM": r"\?[A-Za-z0-9$.+!*'|(){},~@#%&/=:;_?\-\[\]<>]*",
    "URIPATHPARAM": r"%{URIPATH}(?:%{URIPARAM})?",
    "MONTH": r"\b(?:[Jj]an(?:uary)?|[Ff]eb(?:ruary)?|[Mm]ar(?:ch)?|[Aa]pr(?:il)?|[Mm]ay|[Jj]un(?:e)?|[Jj]ul(?:y)?"
    r"|[Aa]ug(?:ust)?|[Ss]ep(?:tember)?|[Oo]ct(?:ober)?|[Nn]ov(?:ember)?|[Dd]ec(?:ember)?)\b",
    "MONTHNUM": r"0?[1-9]|1[0-2]",
    "MONTHDAY": r"(?:0[1-9])|(?:[12][0-9])|(?:3[01])|[1-9]",
    "DAY": r"\b(?:Mon(?:day)?|Tue(?:sday)?|Wed(?:nesday)?|Thu(?:rsday)?|Fri(?:day)?|Sat(?:urday)?|Sun(?:day)?)\b",
    "YEAR": r"\d\d(?:\d\d)?",
    "HOUR": r"2[0123]|[01]?[0-9]",
    "MINUTE": r"[0-5][0-9]",
    "SECOND": r"(?:[0-5]?[0-9]|60)(?:[:.,][0-9]+)?",
    "TIME": r"%{HOUR}:%{MINUTE}(?::%{SECOND})?",
    "DATE_US": r"%{MONTHNUM}[/-]%{MONTHDAY}[/-]%{YEAR}",
    "DATE_EU": r"%{MONTHDAY}[./-]%{MONTHNUM}[./-]%{YEAR}",
    "ISO8601_TIMEZONE": r"Z|[+-]%{HOUR}(?::?%{MINUTE})",
    "TIMESTAMP_ISO8601": r"%{YEAR}-%{MONTHNUM}-%{MONTHDAY}[T ]%{HOUR}:?%{MINUTE}(?::?%{SECOND})?%{ISO8601_TIMEZONE}?",
    "HTTPDATE": r"%{MONTHDAY}/%{MONTH}/%{YEAR}:%{TIME} %{INT}",
    "LOGLEVEL": r"[Aa]lert|ALERT|[Tt]race|TRACE|[Dd]ebug|DEBUG|[Nn]otice|NOTICE|[Ii]nfo|INFO|[Ww]arn(?:ing)?|WARN(?:ING)?"
    r"|[Ee]rr(?:or)?|ERR(?:OR)?|[Cc]rit(?:ical)?|CRIT(?:ICAL)?|[Ff]atal|FATAL|[Ss]evere|SEVERE|EMERG(?:ENCY)?|[Ee]merg(?:ency)?",
    "COMMONAPACHELOG": r"%{IPORHOST:clientip} %{USER:ident} %{USER:auth} \[%{HTTPDATE:timestamp}\] "
    r"\"(?:%{WORD:verb} %{NOTSPACE:request}(?: HTTP/%{NUMBER:httpversion})?|%{DATA:rawrequest})\" "
    r"%{NUMBER:response} (?:%{NUMBER:bytes}|-)",
    "COMBINEDAPACHELOG": r"%{COMMONAPACHELOG} %{QUOTEDSTRING:referrer} %{QUOTEDSTRING:agent}",
}

_GROK_REF = re.compile(r"%\{(\w+)(?::([\w.@-]+))?\}")


def grok_regex(pattern: str) -> str:
    """A grok pattern as a Java regex with named groups.

    ``%{P:name}`` captures as ``name`` at any depth; ``%{P}`` written by the user captures as ``P``
    (as the reference shows ``%{COMMONAPACHELOG}`` with a column of that name), while unnamed
    references inside a pattern's definition do not capture. A name captured twice keeps its first
    group; the others stop capturing.
    """
    taken: set[str] = set()

    def expand(text: str, depth: int) -> str:
        if depth > 20:
            raise PplSemanticError("Grok patterns refer to each other in a cycle")

        def replace(match: re.Match[str]) -> str:
            name, capture = match.group(1), match.group(2)
            definition = GROK_PATTERNS.get(name)
            if definition is None:
                raise PplSemanticError(f"Unknown grok pattern %{{{name}}}")
            body = expand(definition, depth + 1)
            target = capture or (name if depth == 0 else None)
            if target is None or target in taken:
                return f"(?:{body})"
            taken.add(target)
            return f"(?<{target}>{body})"

        return _GROK_REF.sub(replace, text)

    return expand(pattern, 0)
