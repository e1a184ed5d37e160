"""The dashboard's Alpine expressions stay within what Alpine's CSP build parses.

The gateway's CSP has no ``'unsafe-eval'`` (docs/decisions/0009-security-model.md),
so the dashboard runs Alpine's CSP build, which parses attribute expressions
itself: no arrow functions, ``new``, template literals, ``??`` / ``?.``,
statement sequences, regular expressions or globals (``Date``, ``Object``,
``JSON``, ``Math``, ...). This reads every ``x-*`` / ``:`` / ``@`` attribute of
every template and names the ones that would fail in the browser (the browser
tests see them as page errors; this says which line, in a second).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TEMPLATES = Path(__file__).resolve().parents[2] / "web_ui" / "templates"
ALPINE = re.compile(r"^(x-(on|bind|text|show|if|for|model|init|effect|data)\b|[:@])")
STRINGS = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
UNSUPPORTED = {
    "arrow function": re.compile(r"=>"),
    "new": re.compile(r"\bnew\s"),
    "template literal": re.compile(r"`"),
    "?? or ?.": re.compile(r"\?\?|\?\.(?!\d)"),
    "statement sequence": re.compile(r";"),
    "exponent literal": re.compile(r"\d[eE]\d"),
    "global": re.compile(
        r"(?<![\w.$])(Object|Date|Math|JSON|Number|String|Array|Boolean|Intl|RegExp|Promise|Symbol"
        r"|window|document|console|location|navigator|localStorage|sessionStorage|globalThis"
        r"|encodeURIComponent|decodeURIComponent|parseInt|parseFloat|isNaN|setTimeout|fetch)\b"
    ),
}


class Expressions(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[int, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is not None and ALPINE.match(name):
                self.found.append((self.getpos()[0], name, value))


def test_every_template_expression_fits_the_csp_build() -> None:
    problems, count = [], 0
    for template in sorted(TEMPLATES.glob("*.html")):
        parser = Expressions()
        parser.feed(template.read_text())
        for line, name, value in parser.found:
            count += 1
            code = STRINGS.sub("''", re.sub(r"\{\{.*?\}\}|\{%.*?%\}", "x", value))
            for what, pattern in UNSUPPORTED.items():
                if pattern.search(code):
                    problems.append(f"{template.name}:{line} {name}={value!r}: {what}")
    print(f"alpine expressions={count} unsupported={len(problems)}")
    assert count > 400
    assert not problems, "move these into the component's JS module:\n" + "\n".join(problems)


def test_the_check_names_what_the_csp_build_refuses() -> None:
    parser = Expressions()
    parser.feed('<div x-text="new Date(atMs)" @click="a = 1; b()" :class="xs.map((x) => x)"></div>')
    codes = [STRINGS.sub("''", value) for _, _, value in parser.found]
    hits = {what for code in codes for what, pattern in UNSUPPORTED.items() if pattern.search(code)}
    assert {"new", "global", "statement sequence", "arrow function"} <= hits
