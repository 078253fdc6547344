"""tsdatalake pure logic: the Hive layout (Arrow, no Spark) and the silence spool/watcher
with an injected clock."""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from quixsinks.core.errors import LocalStateError, OptionError, RecordError
from quixsinks.sinks.tsdatalake import TSDataLakeOptions, TSDataLakeSink, track
from quixsinks.sinks.tsdatalake.silence import (
    SilenceSpool,
    SilenceWatcher,
    _callback_of,
    decode_key,
    encode_key,
)
from quixsinks.sinks.tsdatalake.wire import (
    NULL_PARTITION,
    Layout,
    _time_value,
    _typed,
    expand,
    partition_values,
    spec_fields,
)

HOUR = 3_600_000


def split(layout: Layout, table: pa.Table) -> dict[str, list[dict[str, Any]]]:
    return {path: part.to_pylist() for path, part in layout.split(table)}


def test_time_columns_are_utc_and_zero_padded() -> None:
    table = pa.table({"ts_ms": [5 * HOUR + 1, None], "v": [1, 2]})
    got = split(Layout(("year", "month", "day", "hour"), "ts_ms"), table)
    assert got == {
        "year=1970/month=01/day=01/hour=05": [{"ts_ms": 5 * HOUR + 1, "v": 1}],
        "year=__None__/month=__None__/day=__None__/hour=__None__": [{"ts_ms": None, "v": 2}],
    }


def test_identity_columns_leave_the_file_and_rows_keep_their_order() -> None:
    table = pa.table({"city": ["b", "a", "b", None], "v": [1, 2, 3, 4]})
    got = split(Layout(("city",), None), table)
    assert got == {
        "city=a": [{"v": 2}],
        "city=b": [{"v": 1}, {"v": 3}],
        f"city={NULL_PARTITION}": [{"v": 4}],
    }


def test_an_empty_hive_value_is_the_null_partition_and_a_literal_none_stays_text() -> None:
    """Spark cannot read a ``c=`` folder: the empty text goes where Spark's own writer puts
    it, the null partition. ``__None__`` as text is written ``%5F_None__``."""
    table = pa.table({"c": ["", None, NULL_PARTITION, "a"], "v": [1, 2, 3, 4]})
    assert sorted(split(Layout(("c",), None), table)) == [
        "c=%5F_None__",
        f"c={NULL_PARTITION}",
        "c=a",
    ]


def test_iceberg_registration_keeps_a_literal_none_as_text() -> None:
    """The catalog registers ``%5F_None__`` as the text ``__None__`` (Hive readers see
    that), and only ``__None__`` itself as a null."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import NestedField, StringType

    schema = Schema(NestedField(1, "c", StringType(), required=False))
    spec = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "c"))
    assert partition_values("t/c=%5F_None__/f.parquet", spec, schema) == [NULL_PARTITION]
    assert partition_values(f"t/c={NULL_PARTITION}/f.parquet", spec, schema) == [None]


def test_values_that_would_break_a_path_are_percent_encoded() -> None:
    table = pa.table({"c": ["a/b", "x=y", "50%", "ok-1.2_3", "\n"], "v": [1, 2, 3, 4, 5]})
    assert sorted(split(Layout(("c",), None), table)) == [
        "c=%0A",
        "c=50%25",
        "c=a%2Fb",
        "c=ok-1.2_3",
        "c=x%3Dy",
    ]


def test_times_before_1970_round_down_and_a_missing_identity_column_is_null() -> None:
    table = pa.table({"ts": pa.array([-1, 0, -HOUR - 1], pa.int64()), "v": [1, 2, 3]})
    got = split(Layout(("year", "month", "day", "hour", "c"), "ts"), table)
    assert got == {
        "year=1969/month=12/day=31/hour=22/c=__None__": [{"ts": -HOUR - 1, "v": 3}],
        "year=1969/month=12/day=31/hour=23/c=__None__": [{"ts": -1, "v": 1}],
        "year=1970/month=01/day=01/hour=00/c=__None__": [{"ts": 0, "v": 2}],
    }


@pytest.mark.parametrize(("unit", "value"), [("s", 5 * 3600), ("us", 5 * HOUR * 1000)])
def test_integer_units(unit: str, value: int) -> None:
    table = pa.table({"t": [value]})
    assert list(split(Layout(("hour",), "t", unit), table)) == ["hour=05"]


def test_a_float_partition_column_is_a_record_error() -> None:
    with pytest.raises(RecordError, match="hive column 'x' has type double"):
        split(Layout(("x",), None), pa.table({"x": [1.5], "v": [1]}))


def test_rows_without_the_timestamp_column_go_to_the_null_time_partition() -> None:
    """JSON values of a batch none of which has the field: as a null time (a DataFrame
    without the column is refused at planning)."""
    assert list(split(Layout(("day",), "ts_ms"), pa.table({"v": [1]}))) == ["day=__None__"]


@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.text(max_size=5)), st.integers(0, 10**13)),
        max_size=40,
    )
)
def test_split_keeps_every_row_exactly_once(rows: list[tuple[str | None, int]]) -> None:
    table = pa.table(
        {
            "c": pa.array([r[0] for r in rows], pa.string()),
            "ts": pa.array([r[1] for r in rows], pa.int64()),
            "i": list(range(len(rows))),
        }
    )
    parts = list(Layout(("day", "c"), "ts").split(table))
    ids = sorted(i for _, part in parts for i in part.column("i").to_pylist())
    assert ids == list(range(len(rows)))
    assert len({p for p, _ in parts}) == len(parts)


def test_options_validate_names() -> None:
    with pytest.raises(OptionError, match="table_name"):
        TSDataLakeOptions.from_options({"path": "/tmp/x", "table_name": "_hidden"})
    with pytest.raises(OptionError, match="each column once"):
        TSDataLakeOptions.from_options({"path": "/tmp/x", "table_name": "t", "hive_columns": "a,a"})
    opts = TSDataLakeOptions.from_options({"s3_prefix": "/tmp/x", "table_name": "t"})
    assert opts.path == "/tmp/x"
    assert opts.timestamp_column == "ts_ms"


def test_the_catalog_token_never_shows() -> None:
    opts = TSDataLakeOptions.from_options(
        {"path": "/tmp/x", "table_name": "t", "catalog_auth_token": "s3cr3t"}
    )
    assert "s3cr3t" not in repr(opts)
    assert "s3cr3t" not in str(opts.redacted())


@pytest.mark.parametrize("key", [b"\x00raw", "sensor-a", 42, 1.5, True])
def test_keys_survive_the_spool(key: Any) -> None:
    back = decode_key(encode_key(key))
    assert back == key
    assert type(back) is type(key)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


CONFIG = {"stream_timeout_ms": 1000, "stream_timeout_state": "memory"}


def test_the_watcher_fires_keys_the_commits_recorded(tmp_path: Path) -> None:
    clock = Clock()
    fired: list[Any] = []
    spool = SilenceSpool("q1", str(tmp_path))
    watcher = SilenceWatcher(
        "q1", on_stream_timeout=fired.append, directory=str(tmp_path), since_ms=0, clock=clock
    )
    spool.record([(b"a", clock.now), (b"b", clock.now)], config=CONFIG, now_ms=clock.now)
    assert watcher.poll() == 2
    assert watcher.tracker is not None
    watcher.tracker.stop()  # driven by hand below
    clock.now += 600
    spool.record([(b"b", clock.now)], config=CONFIG, now_ms=clock.now)
    assert watcher.poll() == 1
    clock.now += 500  # a: 1100 ms silent, b: 500
    assert watcher.tracker.check_now() == [b"a"]
    clock.now += 600
    assert watcher.tracker.check_now() == [b"b"]
    assert fired == [b"a", b"b"]
    # a commit that replays old times changes nothing
    spool.record([(b"a", clock.now - 2000)], config=CONFIG, now_ms=clock.now)
    assert watcher.poll() == 0


def test_memory_state_ignores_times_from_before_the_application_started(tmp_path: Path) -> None:
    clock = Clock()
    spool = SilenceSpool("q2", str(tmp_path))
    spool.record([("old", clock.now - 500)], config=CONFIG, now_ms=clock.now)
    memory = SilenceWatcher(
        "q2", on_stream_timeout=print, directory=str(tmp_path), since_ms=clock.now, clock=clock
    )
    assert memory.poll() == 0
    spool.record([], config={**CONFIG, "stream_timeout_state": "persisted"}, now_ms=clock.now + 1)
    persisted = SilenceWatcher(
        "q2", on_stream_timeout=print, directory=str(tmp_path), since_ms=clock.now, clock=clock
    )
    assert persisted.poll() == 1
    assert persisted.tracker is not None
    persisted.tracker.stop()


def test_the_spool_prunes_keys_silent_for_three_timeouts(tmp_path: Path) -> None:
    spool = SilenceSpool("q3", str(tmp_path))
    assert spool.record([("a", 0), ("b", 2500)], config=CONFIG, now_ms=3000) == 1
    assert [decode_key(k) for k, _ in (spool.read() or {})["keys"]] == ["b"]


def test_without_a_callback_nothing_is_tracked(tmp_path: Path) -> None:
    SilenceSpool("q4", str(tmp_path)).record([("a", 0)], config=CONFIG, now_ms=0)
    watcher = SilenceWatcher("q4", directory=str(tmp_path), since_ms=0)
    assert watcher.poll() == 0
    assert watcher.tracker is None


# ----------------------------------------------------------------------------- hostile spools
# Another local user plants spool files and directories; the spool names os:system and its
# key is a command. Nothing of it may ever run.

OTHER_UID = 65534
FIRED: list[Any] = []


def remember(key: Any) -> None:
    FIRED.append(key)


def plant(directory: Path, marker: Path, query_id: str = "q5") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    body = {
        "stream_timeout_ms": 1000,
        "stream_timeout_state": "persisted",
        "on_stream_timeout": "os:system",
        "sink_class": "os:system",
        "keys": [[encode_key(f"touch {marker}"), Clock().now]],
    }
    (directory / f"{query_id}.json").write_text(json.dumps(body))


def run_watcher(watcher: SilenceWatcher, clock: Clock) -> None:
    """Poll once, then let a tracker (if any) find every key silent."""
    watcher.poll()
    if watcher.tracker is not None:
        watcher.tracker.stop()
        clock.now += 1500  # silent past the timeout, not yet past the TTL sweep
        watcher.tracker.check_now()


def hostile_directory(kind: str, tmp_path: Path) -> Path:
    """A spool directory another user controls, holding a spool that names os:system."""
    spool = tmp_path / "spool"
    if kind == "symlink":
        plant(tmp_path / "attacker", tmp_path / "marker")
        os.chmod(tmp_path / "attacker", 0o777)
        spool.symlink_to(tmp_path / "attacker")
    elif kind == "world-writable":
        plant(spool, tmp_path / "marker")
        os.chmod(spool, 0o777)
    else:
        plant(spool, tmp_path / "marker")
        os.chmod(spool, 0o700)
        os.chown(spool, OTHER_UID, OTHER_UID)
    return spool


HOSTILE = ["symlink", "world-writable", "other-owner"]


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_spool_directory_is_refused_and_nothing_runs(kind: str, tmp_path: Path) -> None:
    spool = hostile_directory(kind, tmp_path)
    clock = Clock()
    watcher = SilenceWatcher(
        "q5", find_callback=lambda: None, directory=str(spool), since_ms=0, clock=clock
    )
    with pytest.raises(LocalStateError) as caught:
        watcher.start()
    assert caught.value.path == str(spool)
    assert "stream_timeout_dir" in caught.value.message
    with pytest.raises(LocalStateError):
        run_watcher(watcher, clock)
    assert watcher.tracker is None
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_commit_never_writes_keys_into_a_hostile_spool_directory(
    kind: str, tmp_path: Path
) -> None:
    spool = hostile_directory(kind, tmp_path)
    with pytest.raises(LocalStateError):
        SilenceSpool("q5", str(spool)).record([("secret-key", 0)], config=CONFIG, now_ms=0)
    target = spool / "q5.json"
    assert "secret-key" not in (target.read_text() if target.exists() else "")


def test_a_sink_refuses_a_hostile_spool_directory_before_any_data_moves(tmp_path: Path) -> None:
    spool = hostile_directory("world-writable", tmp_path)
    options = TSDataLakeOptions.from_options(
        {
            "path": str(tmp_path / "lake"),
            "table_name": "t",
            "stream_timeout_ms": "1000",
            "on_stream_timeout": "tests.unit.test_tsdatalake:remember",
            "stream_timeout_dir": str(spool),
        }
    )
    with pytest.raises(LocalStateError, match="stream_timeout_dir"):
        TSDataLakeSink(options).preflight()


def test_a_hostile_default_spool_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user pre-creates <tmp>/quixsinks-<uid>/silence with a spool in it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = tmp_path / f"quixsinks-{os.geteuid()}"
    plant(root / "silence", tmp_path / "marker")
    os.chmod(root, 0o777)
    os.chown(root, OTHER_UID, OTHER_UID)
    clock = Clock()
    watcher = SilenceWatcher("q5", on_stream_timeout=remember, since_ms=0, clock=clock)
    assert watcher.spool.path == root / "silence" / "q5.json"
    with pytest.raises(LocalStateError, match="TMPDIR"):
        watcher.start()
    with pytest.raises(LocalStateError):
        run_watcher(watcher, clock)
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize("user_callback", [None, remember], ids=["no-callback", "user-callback"])
def test_a_callback_named_by_a_spool_file_is_never_loaded(
    user_callback: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Even in a private directory (e.g. a spool left by an older release): only the
    callback from this process runs, with the key as data."""
    FIRED.clear()
    plant(tmp_path / "spool", tmp_path / "marker")
    os.chmod(tmp_path / "spool", 0o700)
    clock = Clock()
    watcher = SilenceWatcher(
        "q5",
        on_stream_timeout=user_callback,
        find_callback=lambda: None,
        directory=str(tmp_path / "spool"),
        since_ms=0,
        clock=clock,
    )
    run_watcher(watcher, clock)
    assert not (tmp_path / "marker").exists()
    assert "names a callback (on_stream_timeout, sink_class); ignored" in caplog.text
    expected = [f"touch {tmp_path / 'marker'}"] if user_callback else []
    assert expected == FIRED


@pytest.mark.parametrize("kind", ["symlink", "other-owner"])
def test_a_hostile_spool_file_in_a_private_directory_is_ignored(kind: str, tmp_path: Path) -> None:
    FIRED.clear()
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o700)
    now = Clock().now
    SilenceSpool("q5", str(tmp_path / "attacker")).record(
        [("planted", now)], config={**CONFIG, "stream_timeout_state": "persisted"}, now_ms=now
    )
    if kind == "symlink":
        (spool / "q5.json").symlink_to(tmp_path / "attacker" / "q5.json")
    else:
        os.replace(tmp_path / "attacker" / "q5.json", spool / "q5.json")
        os.chown(spool / "q5.json", OTHER_UID, OTHER_UID)
    clock = Clock()
    watcher = SilenceWatcher(
        "q5", on_stream_timeout=remember, directory=str(spool), since_ms=0, clock=clock
    )
    run_watcher(watcher, clock)
    assert (watcher.tracker, FIRED) == (None, [])


def test_the_spool_file_is_private_and_names_no_callback(tmp_path: Path) -> None:
    """It holds record keys (Kafka keys): 0600 in a 0700 directory, whatever the umask."""
    old = os.umask(0)
    try:
        spool = SilenceSpool("q6", str(tmp_path / "spool"))
        spool.record(
            [(b"kafka-key", 0)],
            config={**CONFIG, "on_stream_timeout": "os:system", "sink_class": "os:system"},
            now_ms=0,
        )
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(spool.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "spool").st_mode) == 0o700
    state = spool.read() or {}
    assert "on_stream_timeout" not in state
    assert "sink_class" not in state
    assert [decode_key(k) for k, _ in state["keys"]] == [b"kafka-key"]


def test_a_query_id_that_is_a_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a streaming query id"):
        SilenceSpool("../../etc/x", str(tmp_path))


# ------------------------------------------------------------- the callback, from this process


class _JavaIterator:
    def __init__(self, pairs: dict[str, str]) -> None:
        self.items = list(pairs.items())

    def hasNext(self) -> bool:  # py4j's Scala iterator
        return bool(self.items)

    def next(self) -> Any:
        key, value = self.items.pop(0)
        return SimpleNamespace(_1=lambda: key, _2=lambda: value)


class FakeQuery:
    """A classic StreamingQuery as track() sees it through py4j: its sink's name and the
    options the user started it with."""

    def __init__(self, name: str, options: dict[str, str], query_id: str = "q7") -> None:
        self.id = query_id
        self.isActive = True
        plan = SimpleNamespace(
            writeOptions=lambda: SimpleNamespace(iterator=lambda: _JavaIterator(options))
        )
        execution = SimpleNamespace(
            sink=lambda: SimpleNamespace(name=lambda: name), logicalPlan=lambda: plan
        )
        self._jsq = SimpleNamespace(streamingQuery=lambda: execution)


def test_the_callback_is_the_one_the_query_options_name() -> None:
    query = FakeQuery("tsdatalake", {"onStreamTimeout": "tests.unit.test_tsdatalake:remember"})
    assert _callback_of(query) is remember


def test_the_callback_is_the_registered_subclass_attribute(monkeypatch: pytest.MonkeyPatch) -> None:
    from quixsinks.spark import registry

    class AlertingLake(TSDataLakeSink):
        name = "alerting_lake"
        on_stream_timeout = staticmethod(remember)

    monkeypatch.setitem(registry._REGISTERED, "alerting_lake", AlertingLake)
    assert _callback_of(FakeQuery("alerting_lake", {})) is remember
    assert _callback_of(FakeQuery("other_lake", {})) is None


def test_without_a_jvm_query_no_callback_is_found() -> None:
    """Spark Connect: the client cannot see the options; track() needs the callback."""
    assert _callback_of(SimpleNamespace(id="q8", isActive=True)) is None


def test_track_fires_the_callback_of_the_query_options(tmp_path: Path) -> None:
    FIRED.clear()
    spool = SilenceSpool("q7", str(tmp_path / "spool"))
    config = {"stream_timeout_ms": 200, "stream_timeout_state": "persisted"}
    spool.record([("k", int(time.time() * 1000))], config=config)
    query = FakeQuery("tsdatalake", {"on_stream_timeout": "tests.unit.test_tsdatalake:remember"})
    watcher = track(query, directory=str(tmp_path / "spool"))
    try:
        deadline = time.time() + 10
        while not FIRED and time.time() < deadline:
            time.sleep(0.05)
    finally:
        watcher.stop()
    assert FIRED == ["k"]


# ----------------------------------------------------------------------------- catalog spec


def lake_options(**extra: str) -> TSDataLakeOptions:
    return TSDataLakeOptions.from_options({"path": "/tmp/lake", "table_name": "t", **extra})


@pytest.mark.parametrize(
    ("hive", "ts_type", "expected"),
    [
        ("year,month,day,hour,city", pa.timestamp("us", "UTC"), ["hour(ts_ms)", "city"]),
        ("city,year,month", pa.timestamp("us"), ["city", "month(ts_ms)"]),
        ("year,month,city", pa.timestamp("us"), ["month(ts_ms)", "city"]),
        ("year", pa.timestamp("us", "UTC"), ["year(ts_ms)"]),
        # an integer epoch: Iceberg's time transforms take timestamps only
        ("year,month,day", pa.int64(), ["year", "month", "day"]),
        # a chain with a gap (day without month) has no single transform
        ("year,day", pa.timestamp("us", "UTC"), ["year", "day"]),
        # ... and so has a chain split by another column, or out of order
        ("year,city,month", pa.timestamp("us", "UTC"), ["year", "city", "month"]),
        ("month,year", pa.timestamp("us", "UTC"), ["month", "year"]),
        ("city", None, ["city"]),
    ],
)
def test_the_partition_spec_is_equivalent_to_the_hive_columns(
    hive: str, ts_type: pa.DataType | None, expected: list[str]
) -> None:
    fields = spec_fields(lake_options(hive_columns=hive), ts_type)
    got = [f.source if f.transform == "identity" else f"{f.transform}({f.source})" for f in fields]
    assert got == expected


@given(
    st.permutations(["year", "month", "day", "hour", "city", "sensor"]).flatmap(
        lambda order: st.integers(1, 6).map(lambda n: order[:n])
    ),
    st.sampled_from([pa.timestamp("us", "UTC"), pa.int64(), None]),
)
def test_a_spec_stands_for_exactly_its_hive_columns(
    hive: list[str], ts_type: pa.DataType | None
) -> None:
    """Read back, the spec the sink creates is the layout it checks tables against."""
    assert expand(spec_fields(lake_options(hive_columns=",".join(hive)), ts_type)) == hive


@given(st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 12, 31)))
def test_time_partition_values_from_a_path_match_icebergs_transforms(when: dt.datetime) -> None:
    path = {
        "year": f"{when.year:04d}",
        "month": f"{when.month:02d}",
        "day": f"{when.day:02d}",
        "hour": f"{when.hour:02d}",
    }
    utc = when.replace(tzinfo=dt.UTC)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    hours = (utc - epoch) // dt.timedelta(hours=1)
    assert _time_value("hour", path) == hours
    assert _time_value("day", path) == hours // 24
    assert _time_value("month", path) == (when.year - 1970) * 12 + when.month - 1
    assert _time_value("year", path) == when.year - 1970
    assert _time_value("hour", {**path, "day": None}) is None  # __None__: a null time


def test_identity_values_from_a_path_take_their_columns_type() -> None:
    assert _typed("42", "long") == 42
    assert _typed("true", "boolean") is True
    assert _typed("1970-01-11", "date") == 10
    assert _typed("a/b", "string") == "a/b"
    assert _typed(None, "long") is None


def test_time_hive_columns_need_the_timestamp_among_the_written_columns() -> None:
    """value_columns that leave the timestamp out: every row would land in the __None__
    time partitions; planning refuses it instead, saying what to add."""
    schema = pa.schema([("ts", pa.timestamp("us", "UTC")), ("v", pa.int64())])
    options = lake_options(hive_columns="year,month", timestamp_column="ts", value_columns="v")
    with pytest.raises(OptionError, match="value_columns leaves it out"):
        TSDataLakeSink(options).prepare(schema)
    keep = lake_options(hive_columns="year,month", timestamp_column="ts", value_columns="ts,v")
    TSDataLakeSink(keep).prepare(schema)
