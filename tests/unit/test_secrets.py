"""The one secret rule (quixsinks.core.secrets) and the options' redacted views."""

from __future__ import annotations

import importlib
import pickle
import traceback
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quixsinks.core.errors import DestinationError, QuixSinksError
from quixsinks.core.options import SinkOptions
from quixsinks.core.secrets import (
    MIN_SECRET_LENGTH,
    is_secret_name,
    mask_value,
    scrub,
    scrub_exception,
    scrubbed_errors,
    secret_parts,
)

# ----------------------------------------------------------------------------- the rule


def options_classes() -> dict[str, type[SinkOptions]]:
    """Every built-in sink's options class, found through the registry's table."""
    from quixsinks.spark.registry import BUILTIN_SINKS

    found = {}
    for name, module in BUILTIN_SINKS.items():
        source: Any = importlib.import_module(module).DefaultSource
        found[name] = source.sink_class.options_class
    return found


#: declared secret although the name does not say so: URLs and DSNs that carry a password
DECLARED_ONLY = {"catalog_uri", "url", "connect_options"}
#: secret by name although not declared so: an access key id is hidden as every other
#: sink hides it (the rule's "access key")
NAME_ONLY = {"aws_access_key_id"}


@pytest.mark.parametrize("sink", sorted(options_classes()))
def test_no_declared_plain_option_is_taken_for_a_secret(sink: str) -> None:
    specs = options_classes()[sink].specs()
    wrongly = [
        s.name for s in specs if not s.secret and is_secret_name(s.name) and s.name not in NAME_ONLY
    ]
    assert wrongly == []
    for spec in specs:  # the aliases too (Quix's names)
        for alias in spec.aliases:
            assert is_secret_name(alias) == is_secret_name(spec.name) or spec.secret, alias


@pytest.mark.parametrize("sink", sorted(options_classes()))
def test_every_declared_secret_is_a_secret_by_name_or_on_the_short_list(sink: str) -> None:
    for spec in options_classes()[sink].specs():
        if spec.secret:
            assert spec.is_secret
            assert is_secret_name(spec.name) or spec.name in DECLARED_ONLY, spec.name


@pytest.mark.parametrize(
    "name",
    [
        "password",
        "PGPASSWORD",
        "sslpassword",
        "aws_secret_access_key",
        "awsSecretAccessKey",
        "aws_session_token",
        "catalog_auth_token",
        "catalog.adls.connection-string",
        "adls.connection-string",
        "adls.account-key",
        "adls.sas-token",
        "header.Authorization",
        "token",
        "credential",
        "s3.access-key-id",
        "gcs.oauth2.token",
        "api_key",
        "apiKey",
        "private-key",
        "AccountKey",
        "SharedAccessSignature",
        "sig",
        "service_account_json",
        "client_secret",
    ],
)
def test_credential_names_are_secrets(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "key_column",
        "key_serializer",
        "tags_keys",
        "fields_keys",
        "primary_key_columns",
        "upsert_on_primary_key",
        "partition_key_column",
        "explicit_hash_key_column",
        "ordering_key_column",
        "key_template",
        "key_prefix",
        "sslkey",
        "s3.endpoint",
        "uri",
        "warehouse",
        "rest.signing-name",
        "passthrough",
    ],
)
def test_plain_names_are_not_secrets(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (
            "postgresql+psycopg2://app:hunter22@db:5432/prod?sslmode=require",
            "postgresql+psycopg2://app:***@db:5432/prod?sslmode=require",
        ),
        ("postgresql://app:p@ss@db/x", "postgresql://app:***@db/x"),
        ("http://127.0.0.1:8181/catalog", "http://127.0.0.1:8181/catalog"),
        ("http://host:8080/path@x", "http://host:8080/path@x"),
        ("host=db password='a b\\'c' user=app", "host=db password=*** user=app"),
        ("host=db password=s3cr3t sslmode=require", "host=db password=*** sslmode=require"),
        (
            "DefaultEndpointsProtocol=http;AccountName=dev;AccountKey=Eby8==;BlobEndpoint=x",
            "DefaultEndpointsProtocol=http;AccountName=dev;AccountKey=***;BlobEndpoint=x",
        ),
        (
            "https://acct.blob.core.windows.net/c?sv=2020-01-01&sig=abc%2Bdef&se=2030",
            "https://acct.blob.core.windows.net/c?sv=2020-01-01&sig=***&se=2030",
        ),
        ("https://h/v1?token=t0k3n&x=1", "https://h/v1?token=***&x=1"),
        ("abfss://container@account.dfs.core.windows.net/p", None),
        ("s3://bucket/prefix", None),
    ],
)
def test_a_url_or_dsn_shows_everything_but_its_secret_parts(value: str, shown: str | None) -> None:
    assert mask_value(value) == (value if shown is None else shown)


def test_secret_parts_of_a_url_include_the_decoded_password() -> None:
    parts = secret_parts("postgresql://app:p%40ss@db/x")
    text = scrub("login as app with p@ss failed", parts)
    assert "p@ss" not in text


# ----------------------------------------------------------------------------- scrub


def test_scrub_takes_out_encoded_and_escaped_forms() -> None:
    secret = "pa ss/w@rd'\\"
    text = " ".join(
        [
            secret,
            "pa%20ss%2Fw%40rd%27%5C",
            "pa+ss%2Fw%40rd%27%5C",
            repr(secret),
            '"pa ss/w@rd\'\\\\"',
        ]
    )
    out = scrub(text, [secret])
    assert "pa ss" not in out
    assert "pa%20ss" not in out
    assert "pa+ss" not in out


def test_scrub_masks_url_passwords_and_bearer_tokens_it_was_not_told_about() -> None:
    text = "GET http://u:letmein@h/x failed; Authorization: Bearer abcdefgh12345"
    out = scrub(text)
    assert "letmein" not in out
    assert "abcdefgh12345" not in out
    assert "http://u:***@h/x" in out


def test_scrub_keeps_short_secrets_out_of_plain_text_only_where_structured() -> None:
    out = scrub("user abc at http://u:abc@h/ password=abc", ["abc"])
    assert out == "user abc at http://u:***@h/ password=***"


secret_text = st.text(min_size=MIN_SECRET_LENGTH, max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    secrets=st.lists(secret_text, min_size=1, max_size=3),
    pieces=st.lists(st.one_of(st.text(max_size=8), st.sampled_from(["***", "*", "%", "@", ":"]))),
    data=st.data(),
)
def test_a_scrubbed_text_never_contains_a_secret(
    secrets: list[str], pieces: list[str], data: st.DataObject
) -> None:
    # the secrets anywhere among arbitrary text, also glued to it and to "***"
    parts = list(pieces)
    for secret in secrets:
        parts.insert(data.draw(st.integers(0, len(parts))), secret)
    text = "".join(parts)
    out = scrub(text, secrets)
    for secret in secrets:
        assert secret not in out


# ----------------------------------------------------------------------------- exceptions


def _failing_login(marker: str) -> None:
    with scrubbed_errors([marker]):
        try:
            raise ConnectionError(f"cannot log in with {marker}")
        except ConnectionError as exc:
            raise DestinationError(f"write failed ({marker})") from exc


def test_a_scrubbed_exception_chain_prints_no_secret() -> None:
    marker = "MARK-3f9a1c"
    with pytest.raises(DestinationError) as raised:
        _failing_login(marker)
    printed = "".join(traceback.format_exception(raised.value))
    assert marker not in printed
    assert "cannot log in with ***" in printed
    assert isinstance(raised.value, DestinationError)  # the type is kept


class _Stubborn(Exception):
    def __init__(self, text: str) -> None:
        super().__init__()
        self._text = text

    def __str__(self) -> str:
        return "from a property: " + self.__dict__["_text"].upper()


def test_an_exception_whose_text_resists_becomes_a_scrubbed_quixsinks_error() -> None:
    marker = "mark-77e1"
    error = scrub_exception(_Stubborn(marker), [marker.upper()])
    printed = "".join(traceback.format_exception(error))
    assert marker.upper() not in printed
    assert isinstance(error, QuixSinksError)
    assert "_Stubborn" in printed


def test_an_exception_without_secrets_is_left_alone() -> None:
    error = ValueError("nothing to see")
    assert scrub_exception(error, ["s3cr3t-value"]) is error
    assert error.args == ("nothing to see",)


def test_a_scrubbed_quixsinks_error_still_pickles_with_its_attributes() -> None:
    marker = "MARK-pickle-1"
    error = DestinationError(f"at {marker}", location=f"db {marker}")
    clean = scrub_exception(error, [marker])
    copy = pickle.loads(pickle.dumps(clean))
    assert marker not in repr(copy) + str(copy) + str(vars(copy))
    assert isinstance(copy, DestinationError)


# ----------------------------------------------------------------------------- options


def test_iceberg_pass_through_secrets_are_hidden_and_uris_show_without_password() -> None:
    from quixsinks.sinks.iceberg.options import IcebergOptions

    opts = IcebergOptions.from_options(
        {
            "table_name": "a.b",
            "catalog_type": "rest",
            "catalog_uri": "http://u:M-uri-pw@127.0.0.1:1/",
            "catalog.adls.connection-string": "AccountName=x;AccountKey=M-conn",
            "catalog.header.Authorization": "Bearer M-header",
            "catalog.s3.endpoint": "http://s3user:M-endpoint@127.0.0.1:2",
            "catalog.adls.account-name": "acct",
        }
    )
    shown = repr(opts) + str(opts.redacted())
    assert "M-" not in shown
    assert "acct" in shown
    assert "http://s3user:***@127.0.0.1:2" in shown
    values = opts.secret_values()
    for marker in ("M-uri-pw", "M-conn", "Bearer M-header", "M-endpoint"):
        assert marker in values


def test_tsdatalake_catalog_url_shows_without_its_password() -> None:
    from quixsinks.sinks.tsdatalake.options import TSDataLakeOptions

    opts = TSDataLakeOptions.from_options(
        {"path": "/tmp/lake", "table_name": "t", "catalog_url": "http://cat:M-tsd@127.0.0.1:1/"}
    )
    assert "M-tsd" not in repr(opts) + str(opts.redacted())
    assert "http://cat:***@127.0.0.1:1/" in repr(opts)
    assert "M-tsd" in opts.secret_values()


def test_postgresql_connect_options_are_hidden_and_their_password_known() -> None:
    from quixsinks.sinks.postgresql.options import PostgreSQLOptions

    opts = PostgreSQLOptions.from_options(
        {"dbname": "d", "table_name": "t", "connect_options": "sslpassword='M-pg x'"}
    )
    assert "M-pg" not in repr(opts) + str(opts.redacted())
    assert "M-pg x" in opts.secret_values()


def test_a_bad_value_of_an_option_with_a_url_is_shown_masked() -> None:
    from quixsinks.sinks.tsdatalake.options import TSDataLakeOptions

    with pytest.raises(QuixSinksError) as raised:
        TSDataLakeOptions.from_options(
            {
                "path": "/tmp/lake",
                "table_name": "t",
                "catalog_url": "http://cat:M-bad@h/",
                "catalog_timeout_seconds": "http://x:M-timeout@h/",
            }
        )
    assert "M-" not in str(raised.value) + repr(vars(raised.value))


def test_the_boundary_asks_for_the_secrets_only_when_an_error_passes() -> None:
    asked: list[int] = []

    def secrets() -> list[str]:
        asked.append(1)
        return ["lazy-s3cret"]

    with scrubbed_errors(secrets):
        pass
    assert asked == []
    with pytest.raises(RuntimeError, match=r"\*\*\*") as raised, scrubbed_errors(secrets):
        raise RuntimeError("boom lazy-s3cret")
    assert "lazy-s3cret" not in str(raised.value)
    assert asked == [1]


def test_check_prints_no_secret_of_a_bad_option_value(capsys: pytest.CaptureFixture[str]) -> None:
    from quixsinks.cli import main

    code = main(
        [
            "check",
            "--format",
            "tsdatalake",
            "-o",
            "path=/nonexistent-qs/lake",
            "-o",
            "table_name=t",
            "-o",
            "catalog_url=http://u:cli-s3cret@127.0.0.1:1/",
            "-o",
            "catalog_auth_token=cli-t0ken",
            "-o",
            "catalog_timeout_seconds=cli-t0ken",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "cli-s3cret" not in out
    assert "cli-t0ken" not in out


def test_scrub_leaves_ordinary_words_after_bearer_or_basic_alone() -> None:
    text = "HTTP basic authentication failed; bearer required"
    assert scrub(text) == text
    assert scrub("Authorization: Basic dXNlcjpwYXNz") == "Authorization: Basic ***"
    assert scrub("{'Authorization': 'Bearer abcdef'}") == "{'Authorization': 'Bearer ***'}"
    assert scrub("sent Bearer eyJhbGciOi.J9x") == "sent Bearer ***"


def test_an_os_error_naming_a_secret_file_is_scrubbed_in_place() -> None:
    marker = "key-file-M4rker"
    error = scrub_exception(FileNotFoundError(2, "No such file", f"/keys/{marker}"), [marker])
    assert isinstance(error, FileNotFoundError)
    assert marker not in "".join(traceback.format_exception(error))
