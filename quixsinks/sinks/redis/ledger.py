"""Exactly-once lists and streams: staging hashes, a fenced ledger hash, one Lua commit.

``RPUSH`` and ``XADD`` append: a replay would append twice. So for ``data_type=list`` and
``stream`` each task stages its entries into its own hash (``HSET staging <seq> <entry>``,
idempotent: a retried pipeline rewrites the same fields), named after the sink id, batch,
partition and task attempt. The driver's commit runs one Lua script that, atomically in
Redis: checks the ledger hash (``<key_prefix>_quixsinks:ledger:<sink id>``: batch id ->
query id) for another owner (fencing) and for this batch; checks that every target key
is absent or of the right type; appends the staged entries in partition and row order;
records the batch; prunes old entries; deletes the staging hashes. A replayed batch finds
its ledger entry and only deletes its staging. :class:`RedisLedgerStore` is the same
ledger for core's :class:`~quixsinks.core.ledger.Ledger` (executor fence checks,
takeovers).
"""

from __future__ import annotations

from typing import Any

from quixsinks.core.ledger import LedgerEntry, LedgerStore

__all__ = ["COMMIT_SCRIPT", "RedisLedgerStore", "ledger_key", "registry_key", "staging_key"]


def ledger_key(prefix: str, sink_id: str) -> str:
    return f"{prefix}_quixsinks:ledger:{sink_id}"


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

    def record(self, entry: LedgerEntry) -> bool:
        key = self._key(entry.sink_id)
        return bool(self.client.hsetnx(key, str(entry.batch_id), entry.query_id))

    def drop_query(self, sink_id: str, query_id: str) -> None:
        entries = self.client.hgetall(self._key(sink_id))
        dropped = [k for k, v in entries.items() if v.decode() == query_id]
        if dropped:
            self.client.hdel(self._key(sink_id), *dropped)

    def prune(self, sink_id: str, below_batch_id: int) -> None:
        old = [k for k in self.client.hkeys(self._key(sink_id)) if int(k) < below_batch_id]
        if old:
            self.client.hdel(self._key(sink_id), *old)


#: KEYS: the ledger hash, the staging registry set, then the staging hashes in partition
#: order.
#: ARGV: batch id, query id, data type (list|stream), stream MAXLEN (0: none), batches kept.
#: Entries: "<key length>\n<key>" then, for a list, the value; for a stream, per field
#: "<name length>\n<name><value length>\n<value>".
#: Returns {appended, ""}, {-1, owner query id} (fenced) or {-2, key} (wrong type).
COMMIT_SCRIPT = r"""
local ledger, registry = KEYS[1], KEYS[2]
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
  for i = 3, #KEYS do redis.call('DEL', KEYS[i]) end
  sweep()
  return {0, ''}
end
local function key_of(entry)
  local nl = string.find(entry, '\n', 1, true)
  local n = tonumber(string.sub(entry, 1, nl - 1))
  return string.sub(entry, nl + 1, nl + n), nl + n + 1
end
local staged = {}
local checked = {}
for i = 3, #KEYS do
  local flat = redis.call('HGETALL', KEYS[i])
  local rows = {}
  for j = 1, #flat, 2 do rows[tonumber(flat[j]) + 1] = flat[j + 1] end
  staged[#staged + 1] = rows
  for _, entry in ipairs(rows) do
    local key = key_of(entry)
    if not checked[key] then
      local t = redis.call('TYPE', key)['ok']
      if t ~= 'none' and t ~= dtype then return {-2, key} end
      checked[key] = true
    end
  end
end
local appended = 0
for _, rows in ipairs(staged) do
  for _, entry in ipairs(rows) do
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
local below = tonumber(batch) - keep
if below > 0 then
  for _, b in ipairs(redis.call('HKEYS', ledger)) do
    if tonumber(b) < below then redis.call('HDEL', ledger, b) end
  end
end
for i = 3, #KEYS do redis.call('DEL', KEYS[i]) end
sweep()
return {appended, ''}
"""
