"""What of a URL, an option or a name from the data is fit to show: secrets out, controls escaped.

Errors, warnings, log lines, reprs and progress lines name shards by their URLs, and URLs can
carry secrets: the password (or token) of ``https://user:TOKEN@host/...``, the signature of a
pre-signed ``...?X-Amz-Signature=...``. :func:`redact` replaces them in any text, wherever a
URL occurs in it (also inside a ``pipe:`` command, or a library's message), keeping what finds
the shard again: the scheme, the user, the host, the path and the names of the query's
parameters. Every :class:`~wdspipes.errors.WdsError` passes its message through it, and so do
the few log lines and warnings that name a URL themselves.

>>> redact("https://ann:s3cret@host/d/a.tar?X-Amz-Signature=abc&X-Amz-Expires=60")
'https://ann:***@host/d/a.tar?X-Amz-Signature=***&X-Amz-Expires=***'
>>> redact("pipe:curl -s 'https://TOKEN@host/a.tar' | zcat")
"pipe:curl -s 'https://***@host/a.tar' | zcat"
>>> redact("ftp://ann:p@ss@host/a.tar")  # the user-info ends at the last @
'ftp://ann:***@host/a.tar'
>>> redact("/data/a.tar"), redact("s3://bucket/a.tar")
('/data/a.tar', 's3://bucket/a.tar')

The values of ``storage_options`` (credentials, as often as not) are shown as ``***``
(:func:`redact_options`, :class:`RedactedOptions`); and text from the data is shown to a
terminal with its control characters escaped (:func:`printable`), so that a member name holding
an escape sequence cannot rewrite the screen.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

__all__ = ["HIDDEN", "RedactedOptions", "printable", "redact", "redact_options"]

HIDDEN = "***"
"""What stands for a secret in what is shown."""

# scheme://[user[:password]@]rest, the rest up to whitespace or a quote; then its query.
_URL = re.compile(r"""(?P<head>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^\s/?#'"]*@)?""")
_QUERY = re.compile(r"""(?<=[^\s?])\?(?P<query>[^\s#'"<>)]+)""")
_TRAILING = ",.;:"  # punctuation of the sentence a URL ends, not of the URL


def redact(text: str) -> str:
    """``text`` with the secrets of the URLs in it replaced by ``***``: the password of a
    user-info (the whole user-info if it has no ``:``, as a token there is) and the value of
    every query parameter (a query that is not ``name=value`` pairs whole). A query is taken
    wherever a ``?`` follows a word, so that a library's message naming only the path and
    query of a request (``url: /a.tar?sig=...``) is redacted too.

    >>> redact("GET http://h/x?sig=abc failed; url: /x?token=def")
    'GET http://h/x?sig=*** failed; url: /x?token=***'
    >>> redact("what?"), redact("http://h/x?"), redact("http://h/x?opaque")
    ('what?', 'http://h/x?', 'http://h/x?***')
    """
    if "@" not in text and "?" not in text:
        return text  # nothing to hide: the common case, one scan each
    return _QUERY.sub(_hidden_query, _URL.sub(_hidden_user, text))


def _hidden_user(match: re.Match[str]) -> str:
    user = match.group("user")
    if user is None:
        return match.group(0)
    name, colon, _ = user[:-1].partition(":")
    return f"{match.group('head')}{name + ':' if colon else ''}{HIDDEN}@"


def _hidden_query(match: re.Match[str]) -> str:
    query = match.group("query")
    parameters = query.rstrip(_TRAILING)
    tail = query[len(parameters) :]
    if not parameters:
        return match.group(0)
    shown = []
    for parameter in parameters.split("&"):
        name, equals, _ = parameter.partition("=")
        if not equals:
            return f"?{HIDDEN}{tail}"  # not name=value pairs: a token, perhaps
        shown.append(f"{name}={HIDDEN}")
    return "?" + "&".join(shown) + tail


def redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``storage_options`` as shown: every value ``***`` but booleans, numbers and None
    (``anon=True``, ``block_size``), nested mappings alike.

    >>> redact_options({"key": "AKIA", "secret": "s", "anon": False,
    ...                 "client_kwargs": {"region_name": "x"}})
    {'key': '***', 'secret': '***', 'anon': False, 'client_kwargs': {'region_name': '***'}}
    """
    return {name: _redacted_value(value) for name, value in options.items()}


def _redacted_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, Mapping):
        return redact_options(value)
    return HIDDEN


class RedactedOptions(dict[str, Any]):
    """``storage_options`` that show as :func:`redact_options` shows them (in reprs, and in
    the note torch appends to an error naming the stage's arguments), and pass on as they are.

    >>> options = RedactedOptions({"key": "AKIA", "secret": "s"})
    >>> options, options["secret"]
    ({'key': '***', 'secret': '***'}, 's')
    """

    def __repr__(self) -> str:
        return repr(redact_options(self))

    __str__ = __repr__


def printable(text: str) -> str:
    """``text`` with what a terminal would act on escaped as Python does in a string literal:
    control characters (escape sequences, carriage returns, line breaks, DEL and the C1
    controls), the bidirectional formatting characters that reorder what is shown, line and
    paragraph separators, and lone surrogates (bytes of names that are not UTF-8).

    >>> printable("a\\x1b[2Jb\\rc\\u202ed\\udcff.jpg")
    'a\\\\x1b[2Jb\\\\rc\\\\u202ed\\\\udcff.jpg'
    >>> printable("plain é")
    'plain é'
    """
    if text.isprintable():
        return text
    return "".join(_escaped(char) for char in text)


def _escaped(char: str) -> str:
    if char.isprintable() or unicodedata.category(char) == "Zs":
        return char  # spaces other than " " are not printable to Python, but harmless
    return repr(char)[1:-1]
