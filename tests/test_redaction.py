"""wdspipes/redaction.py: what of a URL, an option or a name from the data is shown."""

from __future__ import annotations

import pickle

import pytest

from wdspipes.redaction import RedactedOptions, printable, redact, redact_options

# (text, as shown)
REDACTED = [
    ("/data/a.tar", "/data/a.tar"),
    ("https://host/d/a.tar", "https://host/d/a.tar"),
    ("https://ann:pw@host/a.tar", "https://ann:***@host/a.tar"),
    ("https://TOKEN@host/a.tar", "https://***@host/a.tar"),
    ("https://ann:p@ss@host:8080/a.tar", "https://ann:***@host:8080/a.tar"),
    ("s3://bucket/a.tar?versionId=7", "s3://bucket/a.tar?versionId=***"),
    (
        "https://h/a.tar?X-Amz-Signature=abc&X-Amz-Expires=60#part",
        "https://h/a.tar?X-Amz-Signature=***&X-Amz-Expires=***#part",
    ),
    ("https://h/a.tar?sometoken", "https://h/a.tar?***"),
    (
        "pipe:curl -s 'https://ann:pw@h/a.tar?sig=1' | cat",
        "pipe:curl -s 'https://ann:***@h/a.tar?sig=***' | cat",
    ),
    ("a.tar: refused (GET http://u:p@h/a?b=c)", "a.tar: refused (GET http://u:***@h/a?b=***)"),
    (
        "Max retries exceeded with url: /a.tar?sig=abc",
        "Max retries exceeded with url: /a.tar?sig=***",
    ),
    ("is it? yes", "is it? yes"),
    ("https://h/a.tar?sig=abc, at byte 0: cut", "https://h/a.tar?sig=***, at byte 0: cut"),
    ("mail ann@host, now", "mail ann@host, now"),
]


@pytest.mark.parametrize(("text", "shown"), REDACTED)
def test_redact(text: str, shown: str) -> None:
    assert redact(text) == shown
    assert redact(shown) == shown, "redacting twice changes nothing"


def test_redacted_options_show_no_value_and_pass_on_whole() -> None:
    options = {"key": "AKIA", "secret": "s3cret", "anon": False, "client_kwargs": {"a": "b"}}
    shown = RedactedOptions(options)
    for text in (repr(shown), str(shown), f"{shown}", repr([shown])):
        assert "AKIA" not in text and "s3cret" not in text and "'b'" not in text
    assert dict(shown) == options and shown["secret"] == "s3cret"
    assert pickle.loads(pickle.dumps(shown)) == options
    assert redact_options(options)["anon"] is False


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain.jpg", "plain.jpg"),
        ("été 日本.jpg", "été 日本.jpg"),
        ("a\x1b]0;pwned\x07b", "a\\x1b]0;pwned\\x07b"),
        ("line\nbreak\rtab\t", "line\\nbreak\\rtab\\t"),
        ("\x9b31m", "\\x9b31m"),  # a C1 control: CSI
        ("abc\u202etxt.exe", "abc\\u202etxt.exe"),  # right-to-left override
        ("bytes\udcff", "bytes\\udcff"),  # a name that is not UTF-8
        ("no\u00a0break", "no\u00a0break"),
    ],
)
def test_printable(text: str, shown: str) -> None:
    assert printable(text) == shown
