"""docs/reliability.md from a run of the fault matrix (``tests/chaos/results.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .faults import FAULTS, FILES, HANG_LIMIT, RECOVERY_RUNS, ROWS

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "chaos" / "results.json"
PAGE = ROOT / "docs" / "reliability.md"

INTRO = """\
# Reliability: the fault matrix

Every sink states a delivery guarantee
([the table](index.md#sinks-and-their-delivery-guarantees)). This page shows what each
sink did under the faults production brings, measured by
`make chaos` (`tests/chaos/`) and generated from its last run; `make test` runs the
quick cells (marked *CI*) on every change.

**The workload.** {files} input files of {rows} rows, each row a unique id, read one file
a micro-batch in two partitions by a streaming query (`trigger(availableNow=True)`).
Each cell writes it into a fresh destination while one fault is injected, restarts the
query from its checkpoint without the fault until it completes (at most {recovery}
runs), reads the destination back and counts the ids **lost** and **duplicated**.

**The verdict.** `exactly-once`: nothing lost, nothing duplicated. `effectively
exactly-once`: nothing lost, a replay overwrites what it wrote. `at-least-once`: nothing
lost; duplicates are counted, and where the sink writes a dedupe id every duplicate must
carry its original's (none left "after dedupe"). A hung server or a full disk must make the run
fail with a clear error (a timeout, no space), never hang (a run still going after
{hang:.0f} s counts as hung); after the fault, the restarted query must complete with the
guarantee intact. Staging tables or prepared transactions left behind are a violation too.

Measured {date} with quixsinks {version} (commit {commits}), pyspark {pyspark}, pyarrow
{pyarrow}, {servers}; one `local[2,4]` Spark session on 2 cores. The CI cells run in the
test suite's `local[2]` session, where a failed task fails the query (then restarted).
"""

FAULT_DOCS = """\
## The faults

| fault | how it is injected |
| --- | --- |
{rows}
"""

CONFIGURE = """\
## What to configure for each guarantee

* **PostgreSQL** (`write_mode=exactly-once`, the default): a crash of the server between
  the tasks' staging and the driver's commit empties the UNLOGGED staging tables; the
  commit sees the rows missing and fails the query (`CommitError ... cannot be
  committed`), writing nothing. Restart the query: the replay stages the batch again.
  For a stream that must ride through server crashes without a restart, use
  `write_mode=prepared` (server setting `max_prepared_transactions` > 0): prepared
  transactions survive crash recovery and the commit completes once the server is back.
  `write_mode=direct` is at-least-once: a lost acknowledgement of a COMMIT, or a replay,
  writes rows again unless upsert or do-nothing absorbs them.
* **BigQuery** (`write_mode=exactly-once`, the default): a commit retried after its
  answer was lost, or replayed after the driver died, finds the ledger row its
  transaction wrote and writes nothing again. `write_mode=direct` is at-least-once: a
  micro-batch replayed after the driver died between `BatchCommitWriteStreams` and
  Spark's checkpoint is written again.
* **file, csvfile** on local disk: a full disk fails the write (`No space left on
  device`); free space and restart the query.
* **Every sink**: a hung server fails the write after the sink's timeouts and retries
  (see each sink's `*_timeout*` options); restart the query once the server answers.

## Throttling storms

Throttling is answered by the destination's own protocol, so each sink's tests inject it
at the server, in bursts, per call and per record, and check every row lands once (or,
past `retry_deadline_seconds`, a clear failure naming what was not delivered):

| sink | tests |
| --- | --- |
| file on S3 | `test_s3_destination.py`: SlowDown, 503 with Retry-After, server errors |
| file on Azure Blob | `test_azure_destination.py`: ServerBusy, Retry-After, throttled writes |
| file on GCS | `test_gcs_destination.py`: 429/503 with Retry-After, a throttled chunk |
| influxdb3 | `test_influxdb3.py`: 429 with Retry-After waited out; backpressure past the deadline |
| influxdb1 | `test_influxdb1.py`: 429 with Retry-After waited out; 503 retried; past the attempts |
| redis | `test_redis.py`: OOM (maxmemory) as backpressure until memory frees; past the deadline |
| kinesis | `test_kinesis.py`: ProvisionedThroughputExceeded per record and per call |
| bigquery | `test_bigquery.py`: throttled query jobs retried, every row once |

## Cells not built here

{not_built}
"""


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(RESULTS.read_text(encoding="utf-8"))
    return data


def _cell_text(cell: dict[str, Any]) -> str:
    verdict = cell["verdict"]
    if verdict.startswith("not built"):
        return "not built"
    loud = [f for f in cell["failures"] if not f.startswith("restart:")]
    head = f"{cell['lost']} lost, {cell['duplicated']} dup"
    if cell.get("after_dedupe") is not None and cell["duplicated"]:
        head += f" ({cell['after_dedupe']} after dedupe)"
    if verdict != "ok":
        return f"**VIOLATION** {head}: {verdict.removeprefix('violation: ')}"
    if cell["fault"] == "driver-kill":
        return f"{head}; killed {cell['fired']}x, restart completed"
    if cell["fault"] in ("hung-server", "disk-full"):
        return f"{head}; failed loudly, restart completed"
    if loud:
        return f"{head}; query failed, restart completed"
    return f"{head}; ran through"


def render(data: dict[str, Any]) -> str:
    cells = data["cells"]
    targets = list(dict.fromkeys(c["target"] for c in cells))
    faults = [f for f in FAULTS if any(c["fault"] == f for c in cells)]
    by_key = {(c["target"], c["fault"]): c for c in cells}
    quick = {tuple(key) for key in data.get("quick", [])}
    header = "| sink | guarantee | " + " | ".join(FAULTS[f].title for f in faults) + " |"
    lines = [header, "|" + " --- |" * (len(faults) + 2)]
    for target in targets:
        row = [
            target,
            by_key[next((target, f) for f in faults if (target, f) in by_key)]["guarantee"],
        ]
        for fault in faults:
            cell = by_key.get((target, fault))
            text = _cell_text(cell) if cell else "not run"
            if (target, fault) in quick:
                text += " (CI)"
            row.append(text)
        lines.append("| " + " | ".join(row) + " |")
    details = [
        "| cell | injected | the faulty run ended with | restarts | seconds |",
        "| --- | --- | --- | --- | --- |",
    ]
    for cell in cells:
        if cell["verdict"].startswith("not built"):
            continue
        loud = [f for f in cell["failures"] if not f.startswith("restart:")]
        ended = (loud[0] if loud else "success").replace("|", "\\|")
        details.append(
            f"| {cell['target']} / {FAULTS[cell['fault']].title} | {cell['injected']} | "
            f"{ended} | {cell['recovery_runs']} | {cell['seconds']} |"
        )
    not_built = sorted(
        {
            (FAULTS[c["fault"]].title, c["target"], c["verdict"].removeprefix("not built: "))
            for c in cells
            if c["verdict"].startswith("not built")
        }
    )
    commits = list(dict.fromkeys(c.get("commit", data["environment"]["commit"]) for c in cells))
    intro = INTRO.format(
        commits=", ".join(commits),
        files=FILES,
        rows=ROWS,
        recovery=RECOVERY_RUNS,
        hang=HANG_LIMIT,
        **data["environment"],
    )
    fault_rows = "\n".join(f"| {FAULTS[f].title} | {FAULTS[f].how} |" for f in faults)
    not_built_text = "\n".join(f"* {title}, {target}: {why}." for title, target, why in not_built)
    return (
        intro
        + "\n## The matrix\n\n"
        + "\n".join(lines)
        + "\n\n"
        + FAULT_DOCS.format(rows=fault_rows)
        + "\n## Each cell\n\n"
        + "\n".join(details)
        + "\n\n"
        + CONFIGURE.format(not_built=not_built_text or "None.")
    )


def write() -> None:
    PAGE.write_text(render(load()), encoding="utf-8")


if __name__ == "__main__":
    write()
