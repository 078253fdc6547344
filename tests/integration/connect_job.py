"""A Spark Connect client (``SparkSession.builder.remote("local[2]")``, which starts a local
Connect server on 127.0.0.1:15002) writing through quixsinks, batch and streaming.

    python connect_job.py OUT_DIR
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def main() -> None:
    from pyspark.sql import SparkSession

    out = sys.argv[1]
    spark = (
        SparkSession.builder.remote("local[2]")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    print("session", type(spark).__module__, flush=True)
    df = spark.range(5).selectExpr("id", "cast(id AS string) AS key")
    # auto-discovery: the server's Python finds pyspark_quixsinks_file by itself
    df.write.format("file").option("path", f"{out}/discovered").mode("append").save()

    import quixsinks

    print("registered", ",".join(quixsinks.register(spark)), flush=True)
    df.write.format("file").option("path", f"{out}/batch").mode("append").save()
    query = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 5)
        .load()
        .writeStream.format("csvfile")
        .option("path", f"{out}/stream.csv")
        .option("checkpointLocation", f"{out}/ck")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    spark.stop()


if __name__ == "__main__":
    main()
