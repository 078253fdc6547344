"""The `file` sink on S3 (moto_server), Azure Blob (Azurite) and GCS (emulator): the same
exactly-once commit protocol as on local disk, proven the same way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import quixsinks
from quixsinks.core.destinations import Destination, destination_for
from quixsinks.sinks.file import FileOptions, FileSink
from quixsinks.testing import faulty, kill_at_random

from .streams import run_available_now, write_input_files

pytestmark = pytest.mark.long  # a minute or more: run first (conftest.py)

STORES = ["s3", "azure", "gcs"]
KILL_JOB = Path(__file__).with_name("kill_job.py")


@dataclass
class Store:
    url: str
    options: dict[str, str]

    def destination(self) -> Destination:
        return destination_for(
            self.url, FileOptions.from_options({"path": self.url, **self.options})
        )

    def ids(self) -> list[int]:
        dest = self.destination()
        ids = []
        for key in dest.list(""):
            if key.endswith(".jsonl") and "/" not in key:
                ids.extend(
                    json.loads(line)["_value"]["id"] for line in dest.read_bytes(key).splitlines()
                )
        return sorted(ids)

    def staged(self) -> list[str]:
        return self.destination().list("_quixsinks/staging")

    def committed(self) -> int:
        return sum(
            1 for k in self.destination().list("_quixsinks/ledger") if not k.endswith("owner.json")
        )


def make_store(kind: str, request: pytest.FixtureRequest, *, bucket: str | None = None) -> Store:
    name = bucket or f"qs-{uuid.uuid4().hex[:12]}"
    if kind == "s3":
        server = request.getfixturevalue("s3_server")
        if bucket is None:
            server.create_bucket(name)
        return Store(f"s3://{name}/out", {k: str(v) for k, v in server.options().items() if v})
    if kind == "azure":
        server = request.getfixturevalue("azurite")
        if bucket is None:
            server.create_container(name)
        return Store(f"az://{name}/out", {"azure_connection_string": server.connection_string()})
    server = request.getfixturevalue("gcs_server")
    if bucket is None:
        server.create_bucket(name)
    opts = server.options()
    return Store(
        f"gs://{name}/out",
        {"gcs_endpoint": opts["endpoint"], "service_account_json": opts["service_account_json"]},
    )


@pytest.fixture(scope="module")
def faulty_file(spark: Any) -> None:
    quixsinks.register(spark, faulty(FileSink))


@pytest.mark.parametrize("kind", STORES)
def test_a_batch_write_lands_every_row_once(
    spark: Any, request: pytest.FixtureRequest, kind: str
) -> None:
    store = make_store(kind, request)
    df = spark.range(50).selectExpr("id", "cast(id % 3 AS string) AS key")
    writer = df.write.format("file").option("path", store.url).options(**store.options)
    writer.mode("append").save()
    dest = store.destination()
    ids = []
    for key in dest.list(""):
        if key.endswith(".jsonl"):
            ids.extend(
                json.loads(line)["_value"]["id"] for line in dest.read_bytes(key).splitlines()
            )
    assert sorted(ids) == list(range(50))
    assert store.staged() == []


@pytest.mark.parametrize("phase", ["write", "commit-before", "commit-after"])
@pytest.mark.parametrize("kind", STORES)
def test_streaming_is_exactly_once_after_a_failure(
    spark: Any,
    faulty_file: None,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    kind: str,
    phase: str,
) -> None:
    store = make_store(kind, request)
    ids = write_input_files(tmp_path / "in", files=3, rows_per_file=10)
    options = {
        "path": store.url,
        **store.options,
        "fail_batch": "1",
        "fail_phase": phase,
        "fail_marker": str(tmp_path / "fired"),
    }
    with pytest.raises(Exception, match="injected failure"):
        run_available_now(spark, tmp_path / "in", "faulty_file", tmp_path / "ck", options)
    run_available_now(spark, tmp_path / "in", "faulty_file", tmp_path / "ck", options)
    assert store.ids() == ids
    assert store.staged() == []


@pytest.mark.parametrize("kind", STORES)
def test_append_on_an_object_store_is_refused_at_planning(
    spark: Any, request: pytest.FixtureRequest, kind: str
) -> None:
    store = make_store(kind, request)
    writer = spark.range(3).write.format("file").option("path", store.url).option("append", "true")
    with pytest.raises(Exception, match="object store cannot append"):
        writer.options(**store.options).mode("append").save()
    assert store.destination().list("") == []


@pytest.mark.parametrize("kind", STORES)
def test_a_missing_bucket_fails_before_any_task(
    spark: Any, request: pytest.FixtureRequest, kind: str
) -> None:
    store = make_store(kind, request, bucket=f"missing-{uuid.uuid4().hex[:8]}")
    writer = spark.range(3).write.format("file").option("path", store.url).options(**store.options)
    with pytest.raises(Exception, match=r"NotFound|does not exist"):
        writer.mode("append").save()


def test_rows_arrive_exactly_once_across_random_driver_kills(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """One job streams into S3 and Azure Blob at once (a query each: one driver's kills hit
    both stores at random moments); it is killed twice after both committed, then finishes
    from its checkpoints: every row once in each store, nothing left in staging."""
    stores = {kind: make_store(kind, request) for kind in ("s3", "azure")}
    seed = int(os.environ.get("QUIXSINKS_KILL_SEED", "7"))
    ids = write_input_files(tmp_path / "in", files=6, rows_per_file=20)
    only_file = json.dumps([{"path": s.url, **s.options} for s in stores.values()])
    args = [sys.executable, str(KILL_JOB), str(tmp_path / "in"), "unused", str(tmp_path / "x.csv")]
    env = {**os.environ, "QUIXSINKS_KILL_ONLY_FILE": only_file}
    kills = kill_at_random(
        [*args, str(tmp_path / "ck")],
        lambda: min(store.committed() for store in stores.values()),
        kills=2,
        seed=seed,
        env=env,
        log_path=str(tmp_path / "job.log"),
    )
    final = subprocess.run(
        [*args, str(tmp_path / "ck"), "--available-now"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert final.returncode == 0, final.stderr[-3000:]
    for kind, store in stores.items():
        assert kills >= 1 or store.committed() > 0, kind
        assert store.ids() == ids, f"{kind}, seed {seed}"
        assert store.staged() == [], kind


def test_a_wrong_azure_key_is_access_denied_before_any_task(
    spark: Any, request: pytest.FixtureRequest
) -> None:
    """Azurite checks its account key, so this is a real 403. (moto_server accepts any
    S3 credentials: the S3 translation is tested at the boundary in the unit tests.)"""
    import base64

    server = request.getfixturevalue("azurite")
    name = f"qs-{uuid.uuid4().hex[:12]}"
    server.create_container(name)
    wrong = base64.b64encode(b"not the key" * 6).decode()
    writer = (
        spark.range(3)
        .write.format("file")
        .option("path", f"az://{name}/out")
        .option(
            "azure_connection_string",
            server.connection_string().replace(server.account_key, wrong),
        )
    )
    with pytest.raises(Exception, match="access denied") as raised:
        writer.mode("append").save()
    assert wrong not in str(raised.value)
