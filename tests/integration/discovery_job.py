"""A fresh Spark session that never calls quixsinks.register: the sinks are found by Spark.

python discovery_job.py OUT_DIR
"""

from __future__ import annotations

import os
import sys

from quixsinks.spark.session import local_session


def main() -> None:
    out = sys.argv[1]
    spark = local_session("quixsinks-discovery")
    df = spark.range(5).selectExpr("id", "cast(id AS string) AS key")
    df.write.format("file").option("path", os.path.join(out, "file")).mode("append").save()
    df.write.format("csvfile").option("path", os.path.join(out, "out.csv")).mode("append").save()
    query = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 5)
        .load()
        .writeStream.format("file")
        .option("path", os.path.join(out, "stream"))
        .option("checkpointLocation", os.path.join(out, "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    print("discovered", flush=True)
    try:
        df.write.format("postgresql").option("dbname", "x").option("table_name", "t").mode(
            "append"
        ).save()
        print("postgresql: usable", flush=True)
    except Exception as exc:  # the extra is blocked in one of the tests
        print(f"postgresql: {str(exc)[:2000]}", flush=True)
    import quixsinks

    print("registered", ",".join(quixsinks.register(spark)), flush=True)
    df.write.format("file").option("path", os.path.join(out, "after")).mode("append").save()
    spark.stop()


if __name__ == "__main__":
    main()
