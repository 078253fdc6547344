"""TLS certificate failures, recognised and explained once for every sink.

A server certificate that does not verify is no network hiccup: retrying cannot fix it, and
the user has to act (trust the server's CA, fix the host name, or, knowingly, switch
verification off). Each sink's error boundary asks :func:`certificate_failure` whether a
failure is one, and raises :func:`certificate_error`, a non-retryable
:class:`~quixsinks.core.errors.DestinationError` that names the server and the sink's
options to set.
"""

from __future__ import annotations

import ssl

from .errors import DestinationError, OptionError

__all__ = [
    "certificate_error",
    "certificate_failure",
    "libpq_certificate_failure",
    "ssl_context",
]

# libpq reports TLS failures as text only (no SQLSTATE, no exception type of its own)
_LIBPQ_CERTIFICATE_TEXTS = (
    "certificate verify failed",
    "root certificate file",
    "does not match host name",
    "could not read root certificate",
)


def certificate_failure(exc: BaseException) -> str | None:
    """Why the server's certificate was refused, if that is what `exc` (or an exception it
    wraps: cause, context, a ``reason``, an argument) says; None for any other failure."""
    seen: set[int] = set()
    pending: list[object] = [exc]
    while pending:
        current = pending.pop()
        if not isinstance(current, BaseException) or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            detail = current.verify_message
            return f"certificate verify failed: {detail}" if detail else str(current)
        pending.extend((current.__cause__, current.__context__, getattr(current, "reason", None)))
        pending.extend(current.args)
    return None


def libpq_certificate_failure(detail: str) -> bool:
    """Whether libpq's connection error text is about the server's certificate."""
    lowered = detail.lower()
    return any(text in lowered for text in _LIBPQ_CERTIFICATE_TEXTS)


def certificate_error(where: str, why: str, *, trust: str, skip: str) -> DestinationError:
    """The error for a server certificate that did not verify.

    Args:
        where: the server (no secret), e.g. ``https://db.example.com:8181``.
        why: what the TLS library said.
        trust: how to trust the server's CA, e.g. ``set ssl_ca_cert to its CA bundle file``.
        skip: how to switch verification off, e.g. ``verify_ssl=false``.
    """
    return DestinationError(
        f"{where}: the server's TLS certificate was not accepted ({why}). If the server's "
        f"certificate comes from a private or self-signed CA, {trust}; to connect without "
        f"verifying the certificate (traffic still encrypted, the server unauthenticated), "
        f"set {skip}",
        location=where,
    )


def ssl_context(sink: str, *, verify: bool, ca_file: str | None) -> ssl.SSLContext:
    """The TLS settings of a sink's HTTPS requests: the CA bundle ``ca_file`` (None: the
    system's), or, with ``verify`` off, no verification at all (tests only). A CA file that
    cannot be read is an OptionError naming the sink's ``ssl_ca_cert`` option."""
    if not verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise OptionError(
            f"{sink}: 'ssl_ca_cert' {ca_file!r} is not a readable file of PEM certificates: {exc}",
            option="ssl_ca_cert",
            value=ca_file,
        ) from None
