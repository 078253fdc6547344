"""MkDocs hooks (mkdocs.yml ``hooks``): docstrings written with Sphinx roles render cleanly.

The code's docstrings cross-reference with Sphinx roles (:func:`register`,
:class:`~quixsinks.core.errors.OptionError`); mkdocstrings renders Markdown, which would
show the role as text before the code span. The role is dropped and, as in Sphinx, a
leading ``~`` keeps only the last dotted part.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:func|class|meth|attr|mod|exc|data|obj|py:\w+):<code>(~?)\.?([^<]+)</code>")


def strip_role(match: re.Match[str]) -> str:
    short, name = match.groups()
    return f"<code>{name.rsplit('.', 1)[-1] if short else name}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub(strip_role, html)
