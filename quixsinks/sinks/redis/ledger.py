"""Exactly-once lists and streams: staging hashes, a fenced ledger hash, one Lua commit.

``RPUSH`` and ``XADD`` append: a replay would append twice. So for ``data_type=list`` and
``stream`` each task stages its entries into its own hash (``HSET staging <seq> <entry>``,
idempotent: a retried pipeline rewrites the same fields), named after the sink id, batch,
partition and task attempt, with the fields ``0..n-1``; the task's receipt names the hash
and counts its ``n`` entries (:class:`StagedHash`). The driver's commit runs one Lua
script that, atomically in Redis: checks the ledger hash
(``<key_prefix>_quixsinks:ledger:<sink id>``: batch id -> query id) for another owner
(fencing) and for this batch; checks that every staging hash holds exactly the entries
its receipt counts; checks that every target key is absent or of the right type; appends
the staged entries in partition and row order; records the batch; prunes old entries;
deletes the staging hashes; and keeps the batch's commit record (JSON) in a parallel hash
(``<key_prefix>_quixsinks:records:<sink id>``, pruned with the ledger). A replayed batch
finds its ledger entry and only deletes its staging.

The count check is what keeps a lost staging hash from becoming lost rows: a server that
restarts without persistence (or within its fsync window), or a replica promoted without
the latest writes, drops staging written before the commit. The script then appends
nothing and records nothing, the commit fails, and the query's restart stages the
micro-batch again (new attempt ids) instead of finding it recorded.
:class:`RedisLedgerStore` is the same ledger for core's
:class:`~quixsinks.core.ledger.Ledger` (executor fence checks, takeovers).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from quixsinks.core.ledger import LedgerEntry, LedgerStore

__all__ = [
    "COMMIT_SCRIPT",
    "RedisLedgerStore",
    "StagedHash",
    "ledger_key",
    "records_key",
    "registry_key",
    "staged_totals",
    "staging_key",
]


@dataclass(frozen=True)
class StagedHash:
    """What one ``write`` staged: the task's staging hash and how many entries it added
    (fields ``first..first+entries-1``; a task's writes share one hash)."""

    key: str
    entries: int


def staged_totals(staged: Iterable[StagedHash]) -> dict[str, int]:
    """Each staging hash once, in the order given (partition order), with the entries the
    task's writes put in it: what the commit must find there."""
    totals: dict[str, int] = {}
    for item in staged:
        totals[item.key] = totals.get(item.key, 0) + item.entries
    return totals


def ledger_key(prefix: str, sink_id: str) -> str:
    return f"{prefix}_quixsinks:ledger:{sink_id}"


def records_key(prefix: str, sink_id: str) -> str:
    """The commit records of a sink id: batch id -> the JSON record, written by the same
    Lua commit as the ledger entry and pruned with it."""
    return f"{prefix}_quixsinks:records:{sink_id}"


def registry_key(prefix: str, name: str) -> str:
    """The set of a writer's staging hashes: a commit deletes those of its batch and older
    ones (left by task attempts that died), so that none outlives the next commit."""
    return f"{prefix}_quixsinks:stagings:{name}"


def staging_key(prefix: str, name: str, batch_id: int, partition: int, attempt: str) -> str:
    return f"{prefix}_quixsinks:staging:{name}:{batch_id}:{partition}:{attempt}"


class RedisLedgerStore(LedgerStore):
    """The ledger hash of one key prefix, through a redis-py client."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def _key(self, sink_id: str) -> str:
        return ledger_key(self.prefix, sink_id)

    def owners(self, sink_id: str) -> set[str]:
        return {v.decode() for v in self.client.hvals(self._key(sink_id))}

    def get(self, sink_id: str, batch_id: int) -> LedgerEntry | None:
        value = self.client.hget(self._key(sink_id), str(batch_id))
        return None if value is None else LedgerEntry(sink_id, batch_id, value.decode())

    def drop_query(self, sink_id: str, query_id: str) -> None:
        entries = self.client.hgetall(self._key(sink_id))
        dropped = [k for k, v in entries.items() if v.decode() == query_id]
        if dropped:
            self.client.hdel(self._key(sink_id), *dropped)
            self.client.hdel(records_key(self.prefix, sink_id), *dropped)


#: KEYS: the ledger hash, the staging registry set, the commit records hash, then the
#: staging hashes in partition order (each once).
#: ARGV: batch id, query id, data type (list|stream), stream MAXLEN (0: none), batches kept,
#: the batch's commit record (JSON; "": none), then per staging hash the entries its task
#: staged (its fields are "0".."n-1").
#: Entries: "<key length>\n<key>" then, for a list, the value; for a stream, per field
#: "<name length>\n<name><value length>\n<value>".
#: Returns {appended, ""}, {-1, owner query id} (fenced), {-2, key} (wrong type) or
#: {-3, staging hash, entries expected, entries found, staging hashes short} (staging lost:
#: nothing appended, the batch not recorded).
COMMIT_SCRIPT = r"""
local ledger, registry, records = KEYS[1], KEYS[2], KEYS[3]
local record = ARGV[6]
local batch, query, dtype = ARGV[1], ARGV[2], ARGV[3]
local function sweep()
  for _, k in ipairs(redis.call('SMEMBERS', registry)) do
    local b = string.match(k, ':(%d+):%d+:[^:]*$')
    if b and tonumber(b) <= tonumber(batch) then
      redis.call('DEL', k)
      redis.call('SREM', registry, k)
    end
  end
end
local maxlen, keep = tonumber(ARGV[4]), tonumber(ARGV[5])
for _, owner in ipairs(redis.call('HVALS', ledger)) do
  if owner ~= query then return {-1, owner} end
end
if redis.call('HEXISTS', ledger, batch) == 1 then
  for i = 4, #KEYS do redis.call('DEL', KEYS[i]) end
  sweep()
  return {0, ''}
end
local function key_of(entry)
  local nl = string.find(entry, '\n', 1, true)
  local n = tonumber(string.sub(entry, 1, nl - 1))
  return string.sub(entry, nl + 1, nl + n), nl + n + 1
end
local staged = {}
local short, first_short = 0, nil
for i = 4, #KEYS do
  local expected = tonumber(ARGV[i + 3])
  local flat = redis.call('HGETALL', KEYS[i])
  local rows, found = {}, 0
  for j = 1, #flat, 2 do
    rows[tonumber(flat[j]) + 1] = flat[j + 1]
    found = found + 1
  end
  local complete = found == expected
  for n = 1, expected do
    if rows[n] == nil then complete = false end
  end
  if not complete then
    short = short + 1
    if first_short == nil then first_short = {KEYS[i], expected, found} end
  end
  staged[#staged + 1] = {rows, expected}
end
if short > 0 then
  return {-3, first_short[1], first_short[2], first_short[3], short}
end
local checked = {}
for _, hash in ipairs(staged) do
  local rows = hash[1]
  for n = 1, hash[2] do
    local key = key_of(rows[n])
    if not checked[key] then
      local t = redis.call('TYPE', key)['ok']
      if t ~= 'none' and t ~= dtype then return {-2, key} end
      checked[key] = true
    end
  end
end
local appended = 0
for _, hash in ipairs(staged) do
  local rows = hash[1]
  for n = 1, hash[2] do
    local entry = rows[n]
    local key, at = key_of(entry)
    if dtype == 'list' then
      redis.call('RPUSH', key, string.sub(entry, at))
    else
      local args = {}
      if maxlen > 0 then
        args = {'MAXLEN', '~', tostring(maxlen)}
      end
      args[#args + 1] = '*'
      while at <= #entry do
        local nl = string.find(entry, '\n', at, true)
        local n = tonumber(string.sub(entry, at, nl - 1))
        args[#args + 1] = string.sub(entry, nl + 1, nl + n)
        at = nl + n + 1
      end
      redis.call('XADD', key, unpack(args))
    end
    appended = appended + 1
  end
end
redis.call('HSET', ledger, batch, query)
if record ~= '' then redis.call('HSET', records, batch, record) end
-- all but the newest `keep` entries (by count: keyed batch ids are sparse), and never
-- this batch's (a keyed backfill of an old id: a retry after a lost reply must find it)
local ids = redis.call('HKEYS', ledger)
if #ids > keep then
  local sorted = {}
  for i, b in ipairs(ids) do sorted[i] = tonumber(b) end
  table.sort(sorted)
  local lowest_kept = sorted[#sorted - keep + 1]
  local this = tonumber(batch)
  for _, b in ipairs(ids) do
    if tonumber(b) < lowest_kept and tonumber(b) ~= this then redis.call('HDEL', ledger, b) end
  end
  for _, b in ipairs(redis.call('HKEYS', records)) do
    if tonumber(b) < lowest_kept and tonumber(b) ~= this then redis.call('HDEL', records, b) end
  end
end
for i = 4, #KEYS do redis.call('DEL', KEYS[i]) end
sweep()
return {appended, ''}
"""
