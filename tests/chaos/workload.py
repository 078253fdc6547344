"""The fault matrix's streaming job, as a process of its own (so that it can be killed).

    python -m tests.chaos.workload CONFIG.json

CONFIG holds ``format``, ``options`` (the sink's), ``input`` (a folder of JSON input
files, see :func:`tests.integration.streams.write_input_files`) and ``checkpoint``. The
job reads the input one file a micro-batch, in two partitions, writes it with
``trigger(availableNow=True)`` and exits 0 once every file is committed, 1 when the
query failed (its error on stderr).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import quixsinks
from quixsinks.spark.session import local_session

from ..integration.streams import stream_from

#: a task may fail and be retried (a killed Python worker) before the query fails
MASTER = "local[2,4]"


def stream(spark: Any, config: dict[str, Any]) -> Any:
    """The started streaming query of ``config`` (the same in and out of process)."""
    writer = (
        stream_from(spark, Path(config["input"]))
        .repartition(2)
        .writeStream.format(config["format"])
        .option("checkpointLocation", config["checkpoint"])
        .options(**config["options"])
    )
    return writer.trigger(availableNow=True).start()


def main(path: str) -> int:
    config = json.loads(Path(path).read_text(encoding="utf-8"))
    spark = local_session("quixsinks-chaos", **{"spark.master": MASTER})
    quixsinks.register(spark)
    query = stream(spark, config)
    query.awaitTermination()
    if query.exception() is not None:
        print(f"query failed: {query.exception()}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
