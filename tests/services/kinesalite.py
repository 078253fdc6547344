"""A throwaway kinesalite (Kinesis implementation, from npm) on 127.0.0.1 for integration tests.

`KinesaliteServer` runs kinesalite in memory on a free port. Its CLI has no host flag, so
the launcher is a ``node -e`` one-liner that calls kinesalite's ``createServer()`` and
listens on 127.0.0.1 only. Streams are created at once (``createStreamMs: 0``). Install it
with ``bash tests/services/install_kinesis.sh``; the launcher runs that script itself when
kinesalite is missing. kinesalite checks no credentials: any key id and secret work.

Manual use: ``python tests/services/kinesalite.py`` starts a server, prints its endpoint
and keeps it running until Ctrl-C.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

if __package__:
    from .common import ProcessService, run_install_script, serve_until_interrupted
else:  # run as a script: python tests/services/kinesalite.py
    from common import (  # type: ignore[no-redef,import-not-found]
        ProcessService,
        run_install_script,
        serve_until_interrupted,
    )

REPO = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO / "tests" / "services" / "install_kinesis.sh"
KINESALITE_DIR = REPO / ".services/kinesalite/node_modules/kinesalite"

REGION = "us-east-1"
#: kinesalite checks no credentials; botocore only needs some
ACCESS_KEY_ID = "kinesalite"
SECRET_ACCESS_KEY = "kinesalite"

LAUNCHER = (
    "const k = require(process.argv[1]);"
    "const s = k({createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 1000});"
    "s.listen(Number(process.argv[2]), '127.0.0.1', () => console.log('listening'));"
    "process.on('SIGTERM', () => process.exit(0));"
)


def ensure_installed() -> Path:
    """kinesalite's package directory, installing it first if it is missing."""
    run_install_script(INSTALL_SCRIPT, KINESALITE_DIR / "index.js", "kinesalite")
    return KINESALITE_DIR


class KinesaliteServer(ProcessService):
    """One throwaway kinesalite: ``start()`` it (or use ``with``), then ``stop()``."""

    name = "kinesalite"
    region = REGION

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- client helpers -------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        """The sink options (Quix's names) that reach this server."""
        return {
            "endpoint_url": self.endpoint_url,
            "region_name": self.region,
            "aws_access_key_id": ACCESS_KEY_ID,
            "aws_secret_access_key": SECRET_ACCESS_KEY,
        }

    def client(self) -> Any:
        """A boto3 Kinesis client for this server."""
        import boto3

        return boto3.client("kinesis", **self.options())

    def create_stream(self, name: str, shards: int = 1) -> None:
        """Create a stream and wait until it is ACTIVE."""
        client = self.client()
        client.create_stream(StreamName=name, ShardCount=shards)
        client.get_waiter("stream_exists").wait(
            StreamName=name, WaiterConfig={"Delay": 0.05, "MaxAttempts": 200}
        )

    def read_all(self, name: str) -> list[dict[str, Any]]:
        """Every record of every shard of ``name`` (GetRecords from TRIM_HORIZON)."""
        client = self.client()
        records: list[dict[str, Any]] = []
        shards = client.list_shards(StreamName=name)["Shards"]
        for shard in shards:
            iterator = client.get_shard_iterator(
                StreamName=name, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            while iterator:
                answer = client.get_records(ShardIterator=iterator, Limit=10_000)
                records.extend(answer["Records"])
                if not answer["Records"] and answer.get("MillisBehindLatest", 0) == 0:
                    break
                iterator = answer.get("NextShardIterator")
        return records

    # -- internals ------------------------------------------------------------------------

    def _install(self) -> Path:
        return ensure_installed()

    def _command(self, installed: Path) -> list[str]:
        return ["node", "-e", LAUNCHER, str(installed), str(self.port)]


def main() -> None:
    """Start a server, print how to reach it, keep it until Ctrl-C (or SIGTERM)."""

    def describe(server: KinesaliteServer) -> None:
        print(f"kinesis: {server.endpoint_url}  (pid {server.pid}, log: {server.logfile})")

    os.environ.setdefault("NODE_NO_WARNINGS", "1")
    serve_until_interrupted(KinesaliteServer(), describe)


if __name__ == "__main__":
    main()
