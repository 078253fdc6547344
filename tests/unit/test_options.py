"""Specification of option parsing: Spark's string options -> a typed, frozen dataclass.

Covers quixsinks.core.options (SinkOptions, option, load_callable) and the options
every sink shares (quixsinks.core.sink.CommonOptions).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import pytest

from quixsinks.core.errors import OptionError
from quixsinks.core.options import REDACTED, OptionSpec, SinkOptions, normalize_name, option
from quixsinks.core.options import load_callable as _load_callable
from quixsinks.core.sink import CommonOptions

SECRET = "s3cr3t-Value-42"
SECRET_NUMBER = "9876"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DemoOptions(CommonOptions):
    """A sink's options as a sink author would declare them."""

    sink_name: ClassVar[str] = "demo"

    path: str = option(doc="Output directory")
    token: str | None = option(None, doc="API token", secret=True, env="X_TOKEN")
    pin: int = option(0, doc="A secret number", secret=True, minimum=0)
    mode: Literal["fast", "slow"] = option("fast", doc="Speed")
    tags: tuple[str, ...] = option((), doc="Comma-separated tags")
    ratio: float = option(1.0, minimum=0, doc="A ratio")
    workers: int = option(1, minimum=1, doc="Worker count")
    wait_timeout_seconds: float = option(30.0, positive=True, doc="A timeout")
    flag: bool = option(False, doc="A switch")
    label: str | None = option(None, doc="An optional label")
    time_key: str = option("ts", doc="Time column", aliases=("time_setter",))


@pytest.fixture(autouse=True)
def _no_token_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("X_TOKEN", raising=False)


def parse(**options: str) -> DemoOptions:
    return DemoOptions.from_options({"path": "/out", **options})


def parse_error(options: dict[str, str]) -> OptionError:
    with pytest.raises(OptionError) as info:
        DemoOptions.from_options(options)
    return info.value


# ----------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "spelling", ["key_column", "keyColumn", "KEYCOLUMN", "keycolumn", "Key_Column", "key-column"]
)
def test_option_is_accepted_in_any_spelling(spelling: str) -> None:
    assert parse(**{spelling: "k"}).key_column == "k"


def test_alias_sets_the_canonical_option() -> None:
    assert parse(time_setter="event_time").time_key == "event_time"


def test_same_option_under_two_spellings_is_an_error() -> None:
    error = parse_error({"path": "/out", "key_column": "a", "keyColumn": "b"})
    assert error.option == "key_column"


def test_option_and_its_alias_together_is_an_error() -> None:
    error = parse_error({"path": "/out", "time_key": "a", "timeSetter": "b"})
    assert error.option == "time_key"


def test_unknown_option_lists_valid_ones() -> None:
    error = parse_error({"path": "/out", "bogus": "1"})
    assert error.option == "bogus"
    assert list(error.allowed or ()) == sorted(spec.name for spec in DemoOptions.specs())


def test_unknown_option_with_a_typo_suggests_the_closest_name() -> None:
    error = parse_error({"path": "/out", "key_colum": "k"})
    assert "Did you mean 'key_column'?" in str(error)


def test_unknown_option_unlike_any_name_has_no_suggestion() -> None:
    error = parse_error({"path": "/out", "zzzzzz": "k"})
    assert "Did you mean" not in str(error)


def test_missing_required_option_is_named() -> None:
    error = parse_error({})
    assert error.option == "path"


@pytest.mark.parametrize("spark_option", ["checkpointLocation", "checkpoint_location", "queryName"])
def test_sparks_own_options_are_ignored(spark_option: str) -> None:
    assert parse(**{spark_option: "/tmp/checkpoint"}) == parse()


def test_normalize_name_ignores_case_underscores_and_dashes() -> None:
    assert normalize_name("Key_Column") == normalize_name("key-column") == "keycolumn"


# ----------------------------------------------------------------------------- values


@pytest.mark.parametrize("text", ["true", "TRUE", "1", "yes", "on", " True "])
def test_bool_true_spellings(text: str) -> None:
    assert parse(flag=text).flag is True


@pytest.mark.parametrize("text", ["false", "False", "0", "no", "off"])
def test_bool_false_spellings(text: str) -> None:
    assert parse(flag=text).flag is False


def test_bad_bool_names_option_and_value() -> None:
    error = parse_error({"path": "/out", "flag": "maybe"})
    assert (error.option, error.value) == ("flag", "maybe")


@pytest.mark.parametrize(("text", "expected"), [("42", 42), (" 7 ", 7), ("-0", 0)])
def test_int_is_parsed(text: str, expected: int) -> None:
    assert parse(pin=text).pin == expected


@pytest.mark.parametrize("text", ["4.5", "abc", "", "1e3", "true"])
def test_bad_int_names_option_and_value(text: str) -> None:
    error = parse_error({"path": "/out", "workers": text})
    assert (error.option, error.value) == ("workers", text)


@pytest.mark.parametrize(("text", "expected"), [("0.25", 0.25), ("3", 3.0), ("1e3", 1000.0)])
def test_float_is_parsed(text: str, expected: float) -> None:
    assert parse(ratio=text).ratio == expected


@pytest.mark.parametrize("text", ["fast", "", "nan", "NaN", "inf", "-inf", "Infinity"])
def test_bad_float_names_option_and_value(text: str) -> None:
    error = parse_error({"path": "/out", "ratio": text})
    assert (error.option, error.value) == ("ratio", text)


@pytest.mark.parametrize("text", ["0", "0.0", "-1", "-0.001", "inf", "nan"])
def test_timeout_must_be_a_finite_number_above_zero(text: str) -> None:
    error = parse_error({"path": "/out", "wait_timeout_seconds": text})
    assert (error.option, error.value) == ("wait_timeout_seconds", text)
    assert "finite number" in error.message or "above 0" in error.message


def test_short_timeout_is_accepted() -> None:
    assert parse(wait_timeout_seconds="0.05").wait_timeout_seconds == 0.05


def test_int_below_minimum_is_an_error() -> None:
    error = parse_error({"path": "/out", "workers": "0"})
    assert (error.option, error.value, error.allowed) == ("workers", "0", ">= 1")


def test_float_below_minimum_is_an_error() -> None:
    error = parse_error({"path": "/out", "ratio": "-0.5"})
    assert (error.option, error.value) == ("ratio", "-0.5")


def test_value_equal_to_minimum_is_accepted() -> None:
    assert parse(workers="1", ratio="0").ratio == 0.0


def test_literal_choice_is_matched_in_any_case() -> None:
    assert parse(mode="SLOW").mode == "slow"


def test_bad_literal_lists_the_choices() -> None:
    error = parse_error({"path": "/out", "mode": "medium"})
    assert (error.option, error.value) == ("mode", "medium")
    assert tuple(error.allowed or ()) == ("fast", "slow")


def test_common_literal_option_is_checked() -> None:
    error = parse_error({"path": "/out", "valueFormat": "xml"})
    assert error.option == "value_format"
    assert tuple(error.allowed or ()) == ("auto", "columns", "json")


def test_tuple_is_split_on_commas_and_stripped() -> None:
    assert parse(tags=" a, b ,,c").tags == ("a", "b", "c")


def test_empty_tuple_option_is_an_empty_tuple() -> None:
    assert parse(tags="").tags == ()


@pytest.mark.parametrize("text", ["", "none", "NULL"])
def test_optional_option_can_be_unset(text: str) -> None:
    assert parse(label=text).label is None


@pytest.mark.parametrize("text", ["None", "none", "null", "NULL", " None ", "  "])
def test_a_secret_that_reads_none_is_kept_as_given(text: str) -> None:
    assert parse(token=text).token == text


@pytest.mark.parametrize("text", ["None", "null"])
def test_a_secret_from_the_environment_that_reads_none_is_kept(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("X_TOKEN", text)
    assert parse().token == text


def test_an_empty_secret_is_unset() -> None:
    assert parse(token="").token is None


@pytest.mark.parametrize("text", ["None", "null"])
def test_a_sink_password_that_reads_none_is_a_password(text: str) -> None:
    from quixsinks.sinks.postgresql.options import PostgreSQLOptions

    options = PostgreSQLOptions.from_options(
        {"dbname": "db", "table_name": "t", "password": text, "key_column": "none"}
    )
    assert options.password == text
    assert options.key_column == "none"  # outside secrets, "none" keeps its meaning


def test_required_string_cannot_be_empty() -> None:
    error = parse_error({"path": " "})
    assert error.option == "path"


def test_defaults_apply_when_options_are_absent() -> None:
    options = parse()
    assert (options.mode, options.workers, options.flag, options.tags) == ("fast", 1, False, ())


def test_options_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        parse().mode = "slow"  # type: ignore[misc]


def test_options_compare_by_value() -> None:
    assert parse(mode="slow") == parse(mode="slow")


def test_mutable_default_is_refused() -> None:
    with pytest.raises(TypeError):
        option([], doc="a list")


# ----------------------------------------------------------------------------- secrets


def test_secret_is_not_in_repr() -> None:
    options = parse(token=SECRET, pin=SECRET_NUMBER)
    assert SECRET not in repr(options)
    assert SECRET_NUMBER not in repr(options)


def test_secret_is_redacted() -> None:
    redacted = parse(token=SECRET, pin=SECRET_NUMBER).redacted()
    assert (redacted["token"], redacted["pin"]) == (REDACTED, REDACTED)


def test_redacted_keeps_other_values() -> None:
    assert parse(mode="slow").redacted()["mode"] == "slow"


def test_unset_secret_is_redacted_as_none() -> None:
    assert parse().redacted()["token"] is None


def test_bad_secret_value_is_not_in_the_error() -> None:
    error = parse_error({"path": "/out", "pin": SECRET})
    assert error.option == "pin"
    assert error.value == REDACTED
    assert SECRET not in str(error)


def test_secret_below_minimum_is_not_in_the_error() -> None:
    error = parse_error({"path": "/out", "pin": "-9876"})
    assert error.value == REDACTED
    assert "9876" not in str(error)


def test_secret_given_twice_is_not_in_the_error() -> None:
    error = parse_error({"path": "/out", "token": SECRET, "TOKEN": SECRET})
    assert error.option == "token"
    assert SECRET not in str(error)


def test_secret_is_not_in_an_unrelated_error() -> None:
    error = parse_error({"path": "/out", "token": SECRET, "workers": "many"})
    assert SECRET not in str(error)


# ----------------------------------------------------------------------------- environment


def test_environment_fills_an_absent_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_TOKEN", "from-env")
    assert parse().token == "from-env"


def test_given_option_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_TOKEN", "from-env")
    assert parse(token="given").token == "given"


def test_empty_environment_variable_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_TOKEN", "")
    assert parse().token is None


# ----------------------------------------------------------------------------- specs


def spec(name: str) -> OptionSpec:
    return next(s for s in DemoOptions.specs() if s.name == name)


def test_specs_list_common_then_own_options_in_declaration_order() -> None:
    names = [s.name for s in DemoOptions.specs()]
    common = [s.name for s in CommonOptions.specs()]
    assert names[: len(common)] == common
    assert names[len(common) :] == [
        "path",
        "token",
        "pin",
        "mode",
        "tags",
        "ratio",
        "workers",
        "wait_timeout_seconds",
        "flag",
        "label",
        "time_key",
    ]


def test_spec_of_a_required_option() -> None:
    path = spec("path")
    assert (path.required, path.default, path.default_text()) == (True, None, "required")


def test_spec_gives_default_and_choices() -> None:
    mode = spec("mode")
    assert (mode.default, mode.choices, mode.required) == ("fast", ("fast", "slow"), False)


def test_spec_gives_secret_env_aliases_and_minimum() -> None:
    assert (spec("token").secret, spec("token").env) == (True, "X_TOKEN")
    assert spec("time_key").aliases == ("time_setter",)
    assert spec("workers").minimum == 1


@pytest.mark.parametrize(
    ("name", "camel"),
    [
        ("path", "path"),
        ("time_key", "timeKey"),
        ("retry_max_backoff_seconds", "retryMaxBackoffSeconds"),
    ],
)
def test_spec_camel_name(name: str, camel: str) -> None:
    assert spec(name).camel_name == camel


@pytest.mark.parametrize(
    ("name", "text"), [("flag", "false"), ("tags", "empty"), ("label", "unset"), ("workers", "1")]
)
def test_spec_default_text(name: str, text: str) -> None:
    assert spec(name).default_text() == text


# ----------------------------------------------------------------------------- CommonOptions


@pytest.mark.parametrize("sink_id", ["../x", "a/b", "..", ".", "with space", "x" * 201, "é"])
def test_hostile_sink_id_is_rejected(sink_id: str) -> None:
    error = parse_error({"path": "/out", "sink_id": sink_id})
    assert (error.option, error.value) == ("sink_id", sink_id)


def test_safe_sink_id_is_accepted() -> None:
    assert parse(sinkId="orders-v2.1_eu").sink_id == "orders-v2.1_eu"


def test_retry_policy_follows_the_retry_options() -> None:
    policy = parse(
        retry_max_attempts="3",
        retry_backoff_seconds="0.1",
        retry_max_backoff_seconds="2",
        retry_deadline_seconds="9",
    ).retry_policy()
    assert (policy.max_attempts, policy.initial_backoff, policy.max_backoff, policy.deadline) == (
        3,
        0.1,
        2.0,
        9.0,
    )


def test_record_schema_follows_the_column_options() -> None:
    import pyarrow as pa

    schema = pa.schema([("id", pa.string()), ("a", pa.int64()), ("b", pa.int64())])
    records = parse(key_column="id", value_columns="b").record_schema(schema)
    assert (records.key, records.values) == ("id", ("b",))


# ----------------------------------------------------------------------------- load_callable


def load_callable(path: str) -> Callable[..., Any]:
    return _load_callable(path, option_name="dumps")


def test_load_callable_imports_a_function() -> None:
    import os.path

    assert load_callable("os.path:join") is os.path.join


def test_load_callable_follows_dotted_attributes() -> None:
    import json

    assert load_callable("json:JSONDecoder.decode") is json.JSONDecoder.decode


@pytest.mark.parametrize("path", ["os.path.join", ":join", "os.path:", ""])
def test_malformed_import_path_is_an_error(path: str) -> None:
    with pytest.raises(OptionError) as info:
        load_callable(path)
    assert (info.value.option, info.value.value) == ("dumps", path)


def test_missing_module_is_an_error() -> None:
    with pytest.raises(OptionError) as info:
        load_callable("no_such_module_for_quixsinks:f")
    assert (info.value.option, info.value.value) == ("dumps", "no_such_module_for_quixsinks:f")


def test_missing_attribute_is_an_error() -> None:
    with pytest.raises(OptionError) as info:
        load_callable("os.path:no_such_function")
    assert info.value.option == "dumps"


def test_non_callable_is_an_error() -> None:
    with pytest.raises(OptionError) as info:
        load_callable("os:sep")
    assert (info.value.option, info.value.value) == ("dumps", "os:sep")


@dataclass(frozen=True, kw_only=True)
class LimitedOptions(SinkOptions):
    sink_name: ClassVar[str] = "limited"

    port: int = option(5432, minimum=1, maximum=65535, doc="Port")
    name: str = option("t", pattern=r"[a-z_][a-z0-9_]*", doc="An identifier")
    table: str = option("t", pattern=r"[a-z]+", pattern_name="a table name", doc="A table")
    names: tuple[str, ...] = option((), pattern=r"[a-z]+", doc="Identifiers")
    token: str | None = option(None, one_of="credentials", doc="A token")
    key_file: str | None = option(None, one_of="credentials", doc="A key file")


def test_maximum_refuses_a_number_above_it() -> None:
    assert LimitedOptions.from_options({"port": "65535"}).port == 65535
    with pytest.raises(
        OptionError, match=r"limited: option 'port' has value '65536', expected a number <= 65535"
    ):
        LimitedOptions.from_options({"port": "65536"})


def test_pattern_must_match_the_whole_value_and_each_list_item() -> None:
    assert LimitedOptions.from_options({"name": "ok_1", "names": "a,b"}).names == ("a", "b")
    with pytest.raises(
        OptionError, match=r"option 'name' has value 'ok; drop', expected a value matching"
    ):
        LimitedOptions.from_options({"name": "ok; drop"})
    with pytest.raises(OptionError, match=r"option 'names' has value 'a,B'"):
        LimitedOptions.from_options({"names": "a,B"})


def test_a_pattern_can_say_in_words_what_it_expects() -> None:
    with pytest.raises(OptionError, match=r"option 'table' has value 'T1', expected a table name$"):
        LimitedOptions.from_options({"table": "T1"})


def test_options_of_one_group_exclude_each_other() -> None:
    assert LimitedOptions.from_options({"keyFile": "k.json"}).key_file == "k.json"
    with pytest.raises(OptionError) as info:
        LimitedOptions.from_options({"token": "s3cret-value", "keyFile": "k.json"})
    message = str(info.value)
    assert "options 'token' and 'keyFile' exclude each other" in message
    assert "s3cret-value" not in message
    # an option set to its default (here: unset) is not given
    assert LimitedOptions.from_options({"token": "none", "keyFile": "k.json"}).token is None


def test_limits_are_spelled_out_for_the_docs() -> None:
    specs = {spec.name: spec for spec in LimitedOptions.specs()}
    assert specs["port"].limits() == ["1 to 65535"]
    assert specs["name"].limits() == ["matches `[a-z_][a-z0-9_]*`"]
    assert specs["token"].limits() == ["excludes the other `credentials` options"]


def test_a_bad_pattern_fails_at_declaration() -> None:
    import re

    with pytest.raises(re.error):
        option("x", pattern="(", doc="broken")
