"""Which Arrow -> PostgreSQL loader: pgpq + psycopg2 ``copy_expert`` vs ADBC bulk ingest.

1,000,000 rows of the benchmark's six columns (text key, bigint, double, boolean, text,
timestamptz), already in Arrow, into a fresh UNLOGGED table of a throwaway PostgreSQL
(``tests/services/postgres.py``), one connection, no Spark:

* ``csv``: pyarrow's CSV writer + ``COPY ... (FORMAT csv)`` (the sink before binary COPY);
* ``pgpq``: ``pgpq`` binary encoding + ``COPY ... (FORMAT binary)`` through psycopg2;
* ``adbc``: ``adbc_driver_postgresql``'s ``adbc_ingest`` (binary COPY in C++).

Interleaved, one warm-up round, median of the rest. Run:
``PYTHONPATH=. .venv/bin/python benchmarks/encode_postgresql.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from tests.services.postgres import PostgresServer

ROWS = 1_000_000
DDL = "key text, a bigint, b double precision, c boolean, s text, ts timestamptz"


def rows(n: int) -> pa.Table:
    ids = pa.array(range(n), pa.int64())
    return pa.table(
        {
            "key": pc.binary_join_element_wise(
                "k", pc.cast(pc.bit_wise_and(ids, 1023), "string"), ""
            ),
            "a": ids,
            "b": pc.divide(pc.cast(ids, pa.float64()), 7.0),
            "c": pc.equal(pc.bit_wise_and(ids, 1), 0),
            "s": pc.utf8_lpad(pc.cast(ids, "string"), 12, "n"),
            "ts": pc.cast(
                pc.add(pc.multiply(ids, 1000), 1714521600000000), pa.timestamp("us", "UTC")
            ),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    table = rows(ROWS)
    with PostgresServer(synchronous_commit=False) as server:
        import adbc_driver_postgresql.dbapi as adbc
        from pgpq import ArrowToPostgresBinaryEncoder

        conn = server.connect()
        cur = conn.cursor()
        cur.execute("SET timezone = UTC")
        uri = f"postgresql://{server.user}:{server.password}@{server.host}:{server.port}/postgres"
        aconn: Any = adbc.connect(uri)

        def csv() -> None:
            naive = table.set_column(5, "ts", pc.cast(table["ts"], pa.timestamp("us")))
            out = pa.BufferOutputStream()
            options = pa_csv.WriteOptions(include_header=False, quoting_style="needed")
            pa_csv.write_csv(naive, out, write_options=options)
            payload = io.BytesIO(out.getvalue().to_pybytes())
            cur.copy_expert("COPY t FROM STDIN WITH (FORMAT csv)", payload)
            conn.commit()

        def pgpq() -> None:
            encoder = ArrowToPostgresBinaryEncoder(table.schema)
            parts = [encoder.write_header()]
            parts.extend(encoder.write_batch(b) for b in table.to_batches())
            parts.append(encoder.finish())
            cur.copy_expert("COPY t FROM STDIN WITH (FORMAT binary)", io.BytesIO(b"".join(parts)))
            conn.commit()

        def adbc_ingest() -> None:
            with aconn.cursor() as acur:
                acur.adbc_ingest("t", table, mode="append")
            aconn.commit()

        cases: dict[str, Callable[[], None]] = {"csv": csv, "pgpq": pgpq, "adbc": adbc_ingest}
        seconds: dict[str, list[float]] = {name: [] for name in cases}
        for round_ in range(args.rounds):
            for name, load in cases.items():
                cur.execute(f"DROP TABLE IF EXISTS t; CREATE UNLOGGED TABLE t ({DDL})")
                conn.commit()
                started = time.perf_counter()
                load()
                elapsed = time.perf_counter() - started
                cur.execute("SELECT count(*) FROM t")
                assert cur.fetchone()[0] == ROWS, name
                if round_:  # the first round warms up
                    seconds[name].append(elapsed)
        started = time.perf_counter()
        encoder = ArrowToPostgresBinaryEncoder(table.schema)
        for b in table.to_batches():
            encoder.write_batch(b)
        encode = time.perf_counter() - started
        for name, runs in seconds.items():
            median = statistics.median(runs)
            print(f"{name}: {ROWS / median:,.0f} rows/s (median of {len(runs)}: {median:.3f} s)")
        print(f"pgpq encoding alone: {ROWS / encode:,.0f} rows/s")
        aconn.close()
        conn.close()


if __name__ == "__main__":
    main()
