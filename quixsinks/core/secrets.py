"""The one secret rule, and the one scrubber every error boundary uses.

An option value is **secret** when

1. its option is declared secret (``option(..., secret=True)``), or
2. its name says so (:func:`is_secret_name`): a name segment such as ``password``,
   ``secret``, ``token``, ``credential``, ``authorization``, ``signature``, ``sas``, or a
   key that is a credential (``access-key``, ``account-key``, ``api-key``, ``private-key``,
   ``shared-key``...), or ``connection-string``; also inside pass-through maps
   (iceberg's ``catalog.*`` properties, libpq ``connect_options``), or
3. it is a URL or a DSN with a password part (``scheme://user:PASSWORD@host``, libpq
   ``password=PASSWORD``) or a credential in its query string (a SAS ``sig=``): then only
   that part is masked (:func:`mask_value`), the rest stays readable.

Names are compared by segments (split at ``_``, ``-``, ``.``, spaces and camelCase), so
``key_column``, ``key_serializer``, ``tags_keys`` or ``primary_key_columns`` are not
secrets while ``aws_secret_access_key``, ``catalog.adls.account-key`` and
``AccountKey`` are.

:func:`scrub` takes every known secret value (and its URL-encoded and escaped forms) out
of a text, and masks URL passwords and ``name=value`` credentials it finds on its own.
:func:`scrubbed_errors` is the boundary around code that calls client libraries: an
exception whose text (its whole chain, as a traceback prints it) holds a secret leaves
it scrubbed.

Secrets shorter than :data:`MIN_SECRET_LENGTH` characters are not replaced as plain
text (a one-letter password would mangle every message); they are still masked where
they stand as a URL password or a ``password=`` value.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit

__all__ = [
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "is_secret_name",
    "mask_value",
    "scrub",
    "scrub_exception",
    "scrubbed_errors",
    "secret_parts",
]

REDACTED = "***"

#: the shortest secret :func:`scrub` replaces wherever it appears in a text
MIN_SECRET_LENGTH = 4

# a segment containing one of these words is a secret's name (sslpassword, authtoken...)
_SECRET_WORDS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "credential",
    "authorization",
    "signature",
    "apikey",
    "accesskey",
    "accountkey",
    "privatekey",
    "sharedkey",
    "connectionstring",
)
# segments that are a secret's name only on their own
_SECRET_SEGMENTS = frozenset({"pwd", "pass", "sas", "sig", "cookie"})
# "<word> key": the key is a credential (an account key), not a key column
_KEY_QUALIFIERS = frozenset(
    {"access", "account", "api", "private", "shared", "secret", "master", "signing", "client"}
)
# adjacent segments that together name a secret
_SECRET_PAIRS = frozenset(
    {("connection", "string"), ("service", "account", "json"), ("x", "amz", "credential")}
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[^A-Za-z0-9]+")


def _segments(name: str) -> list[str]:
    parts: list[str] = []
    for chunk in _SEPARATORS.split(name):
        parts.extend(p.lower() for p in _CAMEL.split(chunk) if p)
    return parts


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether an option or property named ``name`` holds a credential (by its name).

    >>> is_secret_name("catalog.adls.connection-string"), is_secret_name("key_column")
    (True, False)
    """
    segments = _segments(name)
    for i, segment in enumerate(segments):
        if segment in _SECRET_SEGMENTS or any(word in segment for word in _SECRET_WORDS):
            return True
        if segment in ("key", "keys") and i > 0 and segments[i - 1] in _KEY_QUALIFIERS:
            return True
    joined = tuple(segments)
    for pair in _SECRET_PAIRS:
        for i in range(len(joined) - len(pair) + 1):
            if joined[i : i + len(pair)] == pair:
                return True
    return False


# scheme://user:password@host: the password is what lies between the first ':' after
# '//' and the last '@' before the host
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@'\"]*:)(?P<pw>[^\s'\"/]*)@")
# name=value in a query string, a libpq conninfo or an Azure connection string
_ASSIGNMENT = re.compile(
    r"(?P<name>[A-Za-z][A-Za-z0-9_.\-]*)(?P<eq>\s*=\s*)"
    r"(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s&;,'\")]+)"
)
# "Authorization: Bearer xyz" / "Basic xyz" as a header line or an echoed request
# (a credential has a digit or a symbol: "basic authentication failed" is left alone)
_AUTH_HEADER = re.compile(
    r"(?i)\b(bearer|basic)\s+(?P<value>(?=[A-Za-z]*[0-9._~+/=\-])[A-Za-z0-9._~+/=\-]{8,})"
)


# "Authorization: <scheme> <credentials>" as an echoed header
_AUTH_LINE = re.compile(
    r"(?i)\b((?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)(\w+\s+)?[^\s'\",}]+"
)


def _mask_url_passwords(text: str) -> str:
    return _URL_PASSWORD.sub(
        lambda m: m.group("head") + REDACTED + "@" if m.group("pw") else m.group(0), text
    )


def _mask_assignments(text: str) -> str:
    def replace(m: re.Match[str]) -> str:
        if not is_secret_name(m.group("name")):
            return m.group(0)
        return m.group("name") + m.group("eq") + REDACTED

    return _ASSIGNMENT.sub(replace, text)


def mask_value(value: str) -> str:
    """``value`` with the secret parts of a URL or a DSN masked, the rest kept readable:
    ``user:PASSWORD@``, ``password=PASSWORD`` (libpq), ``AccountKey=...`` (Azure), query
    parameters such as ``sig=...`` (SAS) or ``token=...``.

    >>> mask_value("postgresql://app:hunter22@db:5432/prod?sslmode=require")
    'postgresql://app:***@db:5432/prod?sslmode=require'
    """
    return _mask_assignments(_mask_url_passwords(value))


def secret_parts(value: str) -> list[str]:
    """The secret pieces of a URL or a DSN (its password, credential query parameters,
    ``password=`` values), as written and decoded: what :func:`scrub` must find."""
    parts: list[str] = []
    for m in _URL_PASSWORD.finditer(value):
        if m.group("pw"):
            parts.append(m.group("pw"))
    with contextlib.suppress(ValueError):
        password = urlsplit(value).password
        if password:
            parts.append(password)
    parts.extend(m.group("value") for m in _AUTH_HEADER.finditer(value))
    for m in _ASSIGNMENT.finditer(value):
        if is_secret_name(m.group("name")):
            raw = m.group("value")
            parts.append(raw)
            if raw[:1] in "'\"" and raw[-1:] == raw[:1] and len(raw) >= 2:
                parts.append(re.sub(r"\\(.)", r"\1", raw[1:-1]))
    return [p for p in dict.fromkeys(parts) if p]


def _variants(secrets: Iterable[Any]) -> list[str]:
    """Every form in which a secret may show up in a text, longest first."""
    forms: set[str] = set()
    for secret in secrets:
        if secret is None:
            continue
        text = str(secret.reveal() if hasattr(secret, "reveal") else secret)
        for part in (text, *secret_parts(text)):
            forms.update(
                {
                    part,
                    unquote(part),
                    quote(part, safe=""),
                    quote(part),
                    quote_plus(part),
                    json.dumps(part)[1:-1],
                    repr(part)[1:-1],
                    part.encode("unicode_escape").decode("ascii", "replace"),
                }
            )
    return sorted((f for f in forms if len(f) >= MIN_SECRET_LENGTH), key=len, reverse=True)


def scrub(text: str, secrets: Iterable[Any] = ()) -> str:
    """``text`` without any of ``secrets`` (strings, or objects with ``reveal()``), nor
    their URL-encoded or escaped forms, nor URL passwords and ``name=value`` credentials.
    """
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)} {REDACTED}", mask_value(text))
    text = _AUTH_LINE.sub(lambda m: m.group(1) + (m.group(2) or "") + REDACTED, text)
    forms = _variants(secrets)
    # a replacement shortens the text (secrets are longer than "***"), so this ends; it
    # repeats because a replacement can join the text around it into another secret
    changed = True
    while changed:
        changed = False
        for form in forms:
            if form in text:
                text = text.replace(form, REDACTED)
                changed = True
    return text


def _leaks(text: str, forms: list[str]) -> bool:
    return any(form in text for form in forms)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )


def _scrub_value(value: Any, forms: list[str], secrets: list[Any]) -> Any:
    if isinstance(value, str):
        return scrub(value, secrets) if _leaks(value, forms) else value
    if isinstance(value, (tuple, list, Mapping)) and not _leaks(repr(value), forms):
        return value  # unchanged, and of its own type
    if isinstance(value, (tuple, list)):
        return type(value)(_scrub_value(v, forms, secrets) for v in value)
    if isinstance(value, Mapping):
        return {k: _scrub_value(v, forms, secrets) for k, v in value.items()}
    if isinstance(value, BaseException):
        return value  # scrubbed on its own, it is in the chain or printed through str()
    if value is not None and not isinstance(value, (int, float, bool, bytes)):
        text = str(value)
        if _leaks(text, forms):
            return scrub(text, secrets)
    return value


def scrub_exception(exc: BaseException, secrets: Iterable[Any]) -> BaseException:
    """The exception to raise instead of ``exc`` so that no secret shows when it is
    printed with its chain: ``exc`` itself, its arguments and string attributes scrubbed
    in place (and links of its chain that cannot be scrubbed cut off, their text kept
    scrubbed in a note), or a :class:`~quixsinks.core.errors.QuixSinksError` holding its
    scrubbed text when its own text resists."""
    from .errors import QuixSinksError

    secret_list = [s for s in secrets if s is not None]
    forms = _variants(secret_list)
    if not forms or not _leaks("".join(traceback.format_exception(exc)), forms):
        return exc
    for link in _chain(exc):
        try:
            link.args = tuple(_scrub_value(a, forms, secret_list) for a in link.args)
            for name, value in list(vars(link).items()):
                if not name.startswith("__"):
                    setattr(link, name, _scrub_value(value, forms, secret_list))
            if isinstance(link, OSError):  # its text comes from these, not from args
                for name in ("strerror", "filename", "filename2"):
                    value = getattr(link, name)
                    clean = _scrub_value(value, forms, secret_list)
                    if clean is not value:  # set only what changed (a None here is not unset)
                        setattr(link, name, clean)
        except (AttributeError, TypeError):  # read-only attributes: judged by its text below
            pass
        notes = getattr(link, "__notes__", None)
        if isinstance(notes, list):
            setattr(link, "__notes__", [scrub(str(n), secret_list) for n in notes])  # noqa: B010
    # cut the chain at the first link whose own text still holds a secret
    previous: BaseException | None = None
    for link in _chain(exc):
        if _leaks(_own_text(link), forms):
            if previous is None:
                break
            cause = f"(caused by {type(link).__name__}: {scrub(str(link), secret_list)})"
            setattr(previous, "__notes__", [*getattr(previous, "__notes__", []), cause])  # noqa: B010
            previous.__cause__ = None
            previous.__context__ = None
            previous.__suppress_context__ = True
            return exc
        previous = link
    else:
        return exc
    replacement = QuixSinksError(f"{type(exc).__name__}: {scrub(str(exc), secret_list)}")
    replacement.__suppress_context__ = True
    return replacement


def _own_text(exc: BaseException) -> str:
    try:
        return "".join(traceback.format_exception_only(exc))
    except Exception:  # a broken __str__: nothing of it is shown either
        return ""


@contextlib.contextmanager
def scrubbed_errors(secrets: Iterable[Any] | Callable[[], Iterable[Any]]) -> Iterator[None]:
    """Run a block; an exception leaving it carries none of ``secrets`` in its text, its
    arguments, its notes or its chain (see :func:`scrub_exception`). ``secrets`` may be a
    function giving them: it is called only when an exception passes."""
    try:
        yield
    except Exception as exc:
        clean = scrub_exception(exc, secrets() if callable(secrets) else secrets)
        if clean is exc:
            raise
        raise clean from None
