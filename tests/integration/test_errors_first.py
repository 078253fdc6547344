"""Our message first: a quixsinks error reaches the user near the top of what PySpark shows.

Spark hands a Python data source's error to the user as text inside its own exception
(an ``AnalysisException`` at planning, a ``Py4JJavaError`` / ``StreamingQueryException``
from a task or a commit), behind its wrapper and, before this was fixed, behind every
frame of our code and every chained client error: our message started 763 characters
into a misspelled-option error. Each case here fails at one place (planning, a task, a
commit) in a batch write and in a stream, and pins where our message starts in
``str(exc)``; ``quixsinks.error_from`` must find the error again.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pyspark import cloudpickle

import quixsinks
from quixsinks import BatchingSink, CommonOptions, DestinationError, SinkBatch, option
from quixsinks.core.errors import CommitError, OptionError

from .streams import INPUT_SCHEMA, stream_from, write_input_files

cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: where our message must start in str(exc), at the latest: Spark's own wrapper takes up
#: to ~400 characters (a streaming query's ids, a task's stage and executor), then one frame
LIMIT = 600

WRITE_FAILURE = "errors_first_sink: the destination refused the rows (a test failure)"
COMMIT_FAILURE = "errors_first_sink: the commit failed (a test failure)"


@dataclass(frozen=True, kw_only=True)
class FailingOptions(CommonOptions):
    sink_name: ClassVar[str] = "errors_first_sink"
    fail_in: str = option(doc="Where to fail: write or commit")


class FailingSink(BatchingSink[FailingOptions]):
    """Fails in a task or in the driver's commit, with a quixsinks error whose cause is a
    client-like error (the chain that used to come before our message)."""

    name: ClassVar[str] = "errors_first_sink"
    options_class = FailingOptions

    def write(self, batch: SinkBatch) -> None:
        if self.options.fail_in == "write":
            try:
                raise ConnectionRefusedError("a client library's own error text")
            except ConnectionRefusedError as exc:
                raise DestinationError(WRITE_FAILURE) from exc

    def commit(self, context: Any, receipts: list[Any]) -> None:
        if self.options.fail_in == "commit":
            raise CommitError(COMMIT_FAILURE)


@pytest.fixture(scope="module")
def failing_sink(spark: Any) -> None:
    quixsinks.register(spark, FailingSink)


@pytest.fixture(scope="module")
def input_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("errors-first-in")
    write_input_files(folder, files=1, rows_per_file=5)
    return folder


def batch_write(spark: Any, input_dir: Path, fmt: str, options: dict[str, str]) -> None:
    df = spark.read.schema(INPUT_SCHEMA).json(str(input_dir))
    df.write.format(fmt).options(**options).mode("append").save()


def stream_write(
    spark: Any, input_dir: Path, fmt: str, options: dict[str, str], checkpoint: Path
) -> None:
    query = (
        stream_from(spark, input_dir)
        .writeStream.format(fmt)
        .options(**options)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(240)
    finally:
        if query.isActive:
            query.stop()


def failure(write: Any) -> str:
    with pytest.raises(Exception) as info:  # noqa: PT011 - Spark's own exception types
        write()
    return str(info.value)


def assert_first(text: str, error_type: type[quixsinks.QuixSinksError], message: str) -> None:
    shown = f"{error_type.__name__}: {message}"
    position = text.find(shown)
    assert 0 <= position <= LIMIT, f"our message at {position} of {len(text)}:\n{text[:2000]}"
    assert "a client library's own error text" not in text[:position]
    found = quixsinks.error_from(text)
    assert type(found) is error_type
    assert found is not None
    assert found.message.startswith(message)


def test_a_misspelled_option_of_a_batch_write(spark: Any, input_dir: Path, tmp_path: Path) -> None:
    text = failure(lambda: batch_write(spark, input_dir, "file", {"pathh": str(tmp_path)}))
    assert_first(text, OptionError, "file: unknown option 'pathh'. Did you mean 'path'?")


def test_a_misspelled_option_of_a_stream(spark: Any, input_dir: Path, tmp_path: Path) -> None:
    text = failure(lambda: stream_write(spark, input_dir, "file", {"pathh": "x"}, tmp_path / "ck"))
    assert_first(text, OptionError, "file: unknown option 'pathh'. Did you mean 'path'?")


@pytest.mark.parametrize("where", ["write", "commit"])
def test_a_failure_in_a_task_or_a_commit_of_a_batch_write(
    spark: Any, failing_sink: None, input_dir: Path, where: str
) -> None:
    text = failure(lambda: batch_write(spark, input_dir, "errors_first_sink", {"fail_in": where}))
    if where == "write":
        assert_first(text, DestinationError, WRITE_FAILURE)
    else:
        assert_first(text, CommitError, COMMIT_FAILURE)


@pytest.mark.parametrize("where", ["write", "commit"])
def test_a_failure_in_a_task_or_a_commit_of_a_stream(
    spark: Any, failing_sink: None, input_dir: Path, tmp_path: Path, where: str
) -> None:
    text = failure(
        lambda: stream_write(
            spark, input_dir, "errors_first_sink", {"fail_in": where}, tmp_path / "ck"
        )
    )
    if where == "write":
        assert_first(text, DestinationError, WRITE_FAILURE)
    else:
        assert_first(text, CommitError, COMMIT_FAILURE)


def test_error_from_finds_nothing_in_other_errors() -> None:
    assert quixsinks.error_from(ValueError("no quixsinks error here")) is None
    assert quixsinks.error_from("quixsinks.core.errors.NoSuchError: made up") is None
