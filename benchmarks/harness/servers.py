"""Servers: the throwaway destinations a page writes into, from ``tests/services``.

The only module of the benchmarks that imports ``tests.services``. A page names the
servers it needs (``Page.servers``); :func:`servers_for` starts them on 127.0.0.1 for the
page's run and stops them after it. Inside :func:`shared_servers` (the quick runner), a
server is started the first time a page asks for it and kept until the block ends, so
pages that use the same kind of server (InfluxDB 1.x and 3) share one; each page keeps
its data apart (a database, table, topic or stream per run) and leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _services() -> None:
    """Put the repository on ``sys.path`` so that ``tests.services`` imports."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


#: server name -> (module of tests/services, its launcher class, the launcher's arguments);
#: a launcher is a context manager: started on enter, stopped on exit
SERVERS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "postgres": ("postgres", "PostgresServer", {"synchronous_commit": False}),
    "influxdb": ("influxdb", "InfluxServer", {}),
    "redis": ("redis_server", "RedisServer", {}),
    "mosquitto": ("mosquitto", "MosquittoServer", {}),
    "pubsub": ("pubsub_emulator", "PubSubEmulator", {}),
    "kinesalite": ("kinesalite", "KinesaliteServer", {}),
    "bigquery": ("bigquery_emulator", "BQEmulator", {}),
    "moto": ("moto", "MotoServer", {}),
    "azurite": ("azurite", "AzuriteServer", {}),
}


def _launcher(name: str) -> Any:
    module, launcher, arguments = SERVERS[name]
    _services()
    return getattr(importlib.import_module(f"tests.services.{module}"), launcher)(**arguments)


def missing(name: str) -> str | None:
    """Why server ``name`` cannot start on this machine, or None."""
    _services()
    if name == "pubsub":
        from tests.services.pubsub_emulator import missing_reason

        return missing_reason()
    return None


class _Pool:
    """Running servers by name, stopped together; ``prestart`` ones are started in the
    background (two at a time) while the first pages run."""

    def __init__(self, prestart: Sequence[str] = ()) -> None:
        self._stack = contextlib.ExitStack()
        self._lock = threading.Lock()
        self._starting: dict[str, Future[Any]] = {}
        self._starter = ThreadPoolExecutor(2, thread_name_prefix="bench-server")
        for name in dict.fromkeys(prestart):
            self._starting[name] = self._starter.submit(self._start, name)

    def _start(self, name: str) -> Any:
        print(f"starting a throwaway {name} server ...", flush=True)
        server = _launcher(name)
        server.__enter__()
        with self._lock:
            self._stack.push(server.__exit__)
        return server

    def get(self, name: str) -> Any:
        with self._lock:
            if name not in self._starting:
                self._starting[name] = self._starter.submit(self._start, name)
            starting = self._starting[name]
        return starting.result()

    def close(self) -> None:
        self._starter.shutdown(wait=True, cancel_futures=True)
        self._starting.clear()
        self._stack.close()


_shared: _Pool | None = None


@contextlib.contextmanager
def shared_servers(prestart: Sequence[str] = ()) -> Iterator[None]:
    """Keep every server a page starts until the block ends, for the pages after it;
    start the ``prestart`` ones in the background right away."""
    global _shared
    if _shared is not None:
        raise RuntimeError("shared benchmark servers are already open")
    _shared = _Pool(prestart)
    try:
        yield
    finally:
        pool, _shared = _shared, None
        pool.close()


@contextlib.contextmanager
def servers_for(names: Sequence[str]) -> Iterator[dict[str, Any]]:
    """The servers ``names``, running: the shared ones, or new ones stopped at the end."""
    if _shared is not None:
        yield {name: _shared.get(name) for name in names}
        return
    pool = _Pool()
    try:
        yield {name: pool.get(name) for name in names}
    finally:
        pool.close()


# --------------------------------------------------------------------------- helpers pages use


def kinesis_fault_proxy(endpoint_url: str, *, throttle_fraction: float, seed: int) -> Any:
    """A proxy in front of kinesalite refusing ``throttle_fraction`` of the entries of each
    PutRecords (``ProvisionedThroughputExceededException``); a context manager."""
    _services()
    from tests.services.kinesis_faults import KinesisFaultProxy

    return KinesisFaultProxy(endpoint_url, throttle_fraction=throttle_fraction, seed=seed)


def kinesalite_version() -> str | None:
    import json

    _services()
    from tests.services.kinesalite import KINESALITE_DIR

    package = KINESALITE_DIR / "package.json"
    return json.loads(package.read_text()).get("version") if package.is_file() else None


def mqtt_recorder(broker: Any, topic_root: str) -> Any:
    """A QoS 2 subscriber to ``<topic_root>/#`` recording what arrives; a context manager."""
    _services()
    from tests.services.mosquitto import Recorder

    return Recorder(broker, topic_root)


def pubsub_emulator_name() -> str:
    _services()
    from tests.services.pubsub_emulator import find_emulator

    launcher = find_emulator()
    return launcher.resolve().parents[1].name if launcher else ""


def bqemulator_binary() -> Path:
    _services()
    from tests.services.bigquery_emulator import PREFIX

    return Path(PREFIX) / "bin" / "bqemulator"


def azurite_account() -> tuple[str, str]:
    """Azurite's well-known account name and key."""
    _services()
    from tests.services.azurite import ACCOUNT, ACCOUNT_KEY

    return ACCOUNT, ACCOUNT_KEY
