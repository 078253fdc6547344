"""Options of the ``redis`` sink (Quix RedisSink's names, snake_case or camelCase)."""

from __future__ import annotations

import itertools
import string
from dataclasses import dataclass
from typing import ClassVar, Literal

from quixsinks.core.errors import OptionError
from quixsinks.core.options import check_import_path, option
from quixsinks.core.sink import LedgerOptions, small_batches

__all__ = ["APPENDING", "DataType", "RedisOptions", "template_fields", "template_separators"]

DataType = Literal["string", "hash", "set", "zset", "list", "stream"]
#: the data types that append, made exactly-once by staging and a Lua commit
APPENDING = ("list", "stream")


def template_fields(template: str) -> list[tuple[str, str | None]]:
    """``sensor:{city}:{id}`` -> [("sensor:", "city"), (":", "id")]; OptionError if bad."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise OptionError(
            f"redis: 'key_template' {template!r} is not a valid template: {exc}",
            option="key_template",
            value=template,
        ) from None
    out: list[tuple[str, str | None]] = []
    for literal, name, spec, conversion in parsed:
        if name is not None and (not name or spec or conversion or "." in name or "[" in name):
            raise OptionError(
                f"redis: 'key_template' {template!r}: write plain column names in braces, "
                "such as {city} (no format specs, conversions, indexes or empty braces)",
                option="key_template",
                value=template,
            )
        out.append((literal, name))
    return out


def template_separators(template: str) -> dict[str, str]:
    """Column -> the characters its values must not hold, for every column of a key
    template that another column follows: the punctuation (not letters or digits) of the
    literal between them. A key then reads back one way only: each such value ends before
    the first of those characters (``sensor:{city}:{id}``: a city holding ``:`` would
    make ``sensor:a:b:c`` two keys in one; the last column may hold anything).

    OptionError for two columns with no punctuation between them (``{a}{b}``, ``{a}x{b}``):
    no value check could keep their keys apart.
    """
    fields = template_fields(template)
    out: dict[str, str] = {}
    for (_, name), (literal, following) in itertools.pairwise(fields):
        if name is None or following is None:
            continue
        separators = "".join(dict.fromkeys(c for c in literal if not c.isalnum()))
        if not separators:
            raise OptionError(
                f"redis: 'key_template' {template!r}: {{{name}}} and {{{following}}} are "
                f"separated by {literal!r}, which their values could hold too, so two rows "
                "could build one key; put a punctuation character such as ':' between them",
                option="key_template",
                value=template,
            )
        out[name] = "".join(dict.fromkeys(out.get(name, "") + separators))
    return out


@dataclass(frozen=True, kw_only=True)
class RedisOptions(LedgerOptions):
    sink_name: ClassVar[str] = "redis"

    host: str = option("localhost", doc="Server host name (or give 'url')")
    port: int = option(6379, minimum=1, maximum=65535, doc="Server port")
    db: int = option(0, minimum=0, doc="Database number")
    username: str | None = option(None, doc="ACL user name (Redis 6+); default: the default user")
    password: str | None = option(
        None, secret=True, env="REDIS_PASSWORD", doc="Password (default: REDIS_PASSWORD)"
    )
    url: str | None = option(
        None,
        secret=True,
        pattern="redis://.*|rediss://.*|unix://.*",
        doc="redis:// or rediss:// URL instead of host, port, db, username and password",
    )
    socket_timeout: float = option(
        30.0, positive=True, doc="Seconds to wait for the server (connect, send, reply)"
    )
    ssl: bool = option(False, doc="Connect with TLS (as a rediss:// URL does)")
    ssl_ca_certs: str | None = option(
        None,
        doc="CA bundle file (PEM) that verifies the server, for a private or self-signed CA; "
        "default: the system's CAs. The path must exist on the driver and on every executor",
    )
    ssl_verify: bool = option(
        True,
        doc="Verify the server's TLS certificate and host name (every connection, the "
        "start-up check included); false: encrypted but unauthenticated, for tests only",
    )
    data_type: DataType = option(
        "string",
        doc="string: SET key value (Quix's behaviour); hash: HSET one field per value "
        "column; set: SADD key value; zset: ZADD key score value; list: RPUSH key value; "
        "stream: XADD key * one field per value column (list and stream: exactly-once, "
        "staged and committed by one Lua script)",
    )
    key_template: str | None = option(
        None,
        doc="Key built from columns, e.g. sensor:{city}:{id} (or one fixed key, e.g. events "
        "for a list); default: the key column as is",
    )
    key_prefix: str = option("", doc="Text put before every key")
    value_column: str | None = option(
        None,
        one_of="value",
        doc="Write this one column as the value as is (text and bytes unchanged, numbers as "
        "text, other types as JSON); default: a Kafka JSON value as the producer wrote it "
        "(null for a tombstone), else a compact JSON object of the value columns",
    )
    key_serializer: str | None = option(
        None,
        doc="Import path (module:function) called per row as f(key, value), as Quix calls "
        "its key_serializer: the key as stored (bytes for a Kafka key), the value as "
        "'value_serializer' gets it; returns str or bytes (slower than the default)",
    )
    value_serializer: str | None = option(
        None,
        one_of="value",
        doc="Import path (module:function) called per row on the value as a Quix app holds "
        "it (a Kafka JSON value: json.loads of the message, None for a tombstone; else a "
        "dict of the value columns); returns str or bytes. json:dumps writes Quix's "
        "RedisSink bytes exactly; the default writes the producer's JSON unchanged",
    )
    hash_replace: bool = option(
        False,
        doc="hash: delete the key before HSET so that it holds only this row's fields "
        "(default: the fields are updated, others kept)",
    )
    score_column: str | None = option(None, doc="zset: the numeric column holding the score")
    ttl_seconds: int | None = option(
        None, minimum=1, one_of="ttl", doc="Expire every written key after this many seconds"
    )
    ttl_column: str | None = option(
        None,
        one_of="ttl",
        doc="Integer column: seconds until the row's key expires (null: no expiry)",
    )
    null_keys: Literal["error", "skip"] = option(
        "error", doc="A row whose key is null: fail naming the row, or skip it and count it"
    )
    stream_maxlen: int | None = option(
        None, minimum=1, doc="stream: trim each stream to about this many entries (MAXLEN ~)"
    )
    cluster: bool = option(
        False,
        doc="Redis Cluster: rows go to the node of their key's hash slot, pipelined per node "
        "(string, hash, set, zset)",
    )
    max_batch_bytes: int = small_batches("a SinkBatch's commands are built before it is sent")
    pipeline_size: int = option(
        1000,
        minimum=1,
        doc="Commands per pipeline (one network round trip); for string keys without a TTL, "
        "keys per MSET (at most 16 MiB of them)",
    )

    def validate(self) -> None:
        super().validate()
        if self.ssl_ca_certs is not None and not (
            self.ssl or (self.url or "").startswith("rediss://")
        ):
            raise OptionError(
                "redis: 'ssl_ca_certs' is given but TLS is off (the connection would not be "
                "encrypted): set ssl=true, or use a rediss:// url",
                option="ssl_ca_certs",
                value=self.ssl_ca_certs,
            )
        if self.key_template is not None:
            template_separators(self.key_template)
        if self.data_type == "zset" and self.score_column is None:
            raise OptionError(
                "redis: data_type=zset needs 'score_column' (the column holding each score)",
                option="score_column",
            )
        if self.data_type != "zset" and self.score_column is not None:
            raise OptionError(
                f"redis: 'score_column' applies to data_type=zset only, not {self.data_type}",
                option="score_column",
                value=self.score_column,
            )
        if self.data_type in APPENDING and (self.ttl_seconds or self.ttl_column):
            raise OptionError(
                f"redis: TTLs apply to string, hash, set and zset, not {self.data_type}",
                option="ttl_seconds" if self.ttl_seconds else "ttl_column",
            )
        if self.cluster and self.data_type in APPENDING:
            raise OptionError(
                f"redis: data_type={self.data_type} is not supported with cluster=true (its "
                "commit script needs every key on one node)",
                option="cluster",
            )
        if self.cluster and self.db != 0:
            raise OptionError("redis: a Redis Cluster has only db 0", option="db")
        if self.stream_maxlen is not None and self.data_type != "stream":
            raise OptionError(
                "redis: 'stream_maxlen' applies to data_type=stream only", option="stream_maxlen"
            )
        if self.hash_replace and self.data_type != "hash":
            raise OptionError(
                "redis: 'hash_replace' applies to data_type=hash only", option="hash_replace"
            )
        if self.data_type in ("hash", "stream") and (self.value_column or self.value_serializer):
            raise OptionError(
                f"redis: data_type={self.data_type} writes one field per value column; "
                "'value_column' and "
                "'value_serializer' do not apply (choose the fields with value_columns)",
                option="value_column" if self.value_column else "value_serializer",
            )
        for name in ("key_serializer", "value_serializer"):
            check_import_path(getattr(self, name), option_name=name)
