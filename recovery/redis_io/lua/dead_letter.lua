-- Move entries of one or more units (stream, group, job consumer) from their group's PEL to
-- their dead-letter streams, atomically (one script call: on a Redis Cluster give it one
-- unit, as all keys of a call must share a slot).
-- KEYS, per unit in order: its source stream, its dead-letter stream (same hash slot as its
-- source), and, for a unit that holds keys (ARGV flag below), the hash of its held keys
-- (same slot: recovery/redis_io/key_holds.py).
-- ARGV[1]: run id; ARGV[2]: delivery limit; ARGV[3]: death time (epoch ms); ARGV[4]: '1' to
-- check the newest entry of a dead-letter stream too (XINFO STREAM: the user may run it),
-- '0' to check its oldest only (XRANGE, which every documented ACL rule grants); ARGV[5]: '1'
-- to ack a moved entry with XACKDEL ... ACKED (Redis 8.2+: the entry is also deleted from its
-- stream unless another group still references it), '0' with XACK; then per unit,
-- in KEYS order: its group; the job's consumer (only entries it owns move); the source name
-- (x-original-stream); the number n of its entries; '1' if it holds keys, else '0'; then 6
-- values per entry (7 where the unit holds keys): id, delivery count (with a requeued copy's
-- carried deliveries, whose field is not copied), idle ms (before the claim), last owner (''
-- if unknown), reason, handler error ('' if none)[, its ordering key: '' if none, else
-- '=' and the key, so an empty key is one]. An entry
-- with a key that moves records its key as held behind it, in the same call: HSETNX hash key
-- '<id> <dead-letter id>' (a key already held keeps its first head), before the entry is
-- acked. A user who may not HSETNX the hash fails the call before the unit writes anything
-- (Redis 7.0+), or (6.2) at that HSETNX, the letter written but the head still pending.
-- Reply: one element per unit, in order: an array with one element per entry, in order: the
-- new dead-letter ID if moved (with ARGV[5] '1': {the new ID, XACKDEL's code: 1 deleted, 2
-- kept because another group still references it}); 0 if the entry is no longer pending or owned by the job's
-- consumer (someone acked or claimed it: left alone); -1 if the entry was deleted from the
-- stream upstream (it is acked, so it leaves the PEL, and nothing is written); -2 if the entry
-- has too many fields to be re-added from a script (Lua's unpack() takes at most ~8000 values,
-- i.e. ~3950 fields): left pending, nothing is written.
-- Or, in place of that array, the error the unit's stream, group or dead-letter stream
-- answered (NOGROUP, WRONGTYPE): that unit stops there (entries it moved before stay moved,
-- as when a script call of its own fails), the other units go on. Any other error (an ACL
-- refusal, OOM) fails the whole call, as redis.call does.
-- Or, in place of that array, the error 'NOTLETTERS <type> <why>' when the unit's
-- dead-letter stream is not the job's to write (checked before its first entry, in the same
-- atomic call): it must be missing, an empty stream, or a stream whose oldest entry (and,
-- with ARGV[4] '1', newest entry) carries the metadata block (x-original-stream,
-- x-original-id, x-death-reason), and never the source itself; and its hash of held keys
-- must be neither of the unit's streams, and missing or a hash of the job's
-- ('NOTLETTERS hold:<type> it is no hash'; a hash
-- whose value HRANDFIELD picks is no '<id> <id>': 'NOTLETTERS hold:hash ...'). Then nothing of that
-- unit is written or acked: its entries stay pending.
local MAX_VALUES = 7900
local run_id, limit, death_time, newest = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1'
local delete = ARGV[5] == '1'

local function unit_gone(reply)
  return type(reply) == 'table' and reply.err ~= nil
    and (reply.err:find('^NOGROUP ') ~= nil or reply.err:find('^WRONGTYPE ') ~= nil)
end

local function failed(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

-- Move one entry (its 6 values at ARGV[i]); its reply element, or the unit's error.
local function move(stream, dlq, held, group, consumer, source, i)
  local id = ARGV[i]
  local owned = redis.pcall('XPENDING', stream, group, id, id, 1, consumer)
  if unit_gone(owned) then return owned end
  if failed(owned) then  -- again, to fail as redis.call fails (ACL errors name its line)
    owned = redis.call('XPENDING', stream, group, id, id, 1, consumer)
  end
  if #owned == 0 then return 0 end
  local found = redis.call('XRANGE', stream, id, id)
  if #found == 0 then
    redis.call('XACK', stream, group, id)
    return -1
  end
  if #found[1][2] + 26 > MAX_VALUES then return -2 end
  local args = {dlq, '*'}
  local fields = found[1][2]
  for j = 1, #fields, 2 do  -- verbatim, but a requeued copy's carried count (see meta)
    if fields[j] ~= 'x-recovery-deliveries' then
      args[#args + 1] = fields[j]; args[#args + 1] = fields[j + 1]
    end
  end
  local meta = {
    'x-original-stream', source, 'x-original-group', group, 'x-original-id', id,
    'x-delivery-count', ARGV[i + 1], 'x-delivery-limit', limit, 'x-idle-ms', ARGV[i + 2],
    'x-death-reason', ARGV[i + 4], 'x-death-time', death_time, 'x-run-id', run_id}
  for _, v in ipairs(meta) do args[#args + 1] = v end
  if ARGV[i + 3] ~= '' then
    args[#args + 1] = 'x-original-consumer'; args[#args + 1] = ARGV[i + 3]
  end
  if ARGV[i + 5] ~= '' then
    args[#args + 1] = 'x-exception-message'; args[#args + 1] = ARGV[i + 5]
  end
  local dlq_id = redis.pcall('XADD', unpack(args))
  if unit_gone(dlq_id) then return dlq_id end
  if failed(dlq_id) then  -- nothing was written: again, to fail as redis.call fails
    dlq_id = redis.call('XADD', unpack(args))
  end
  if held and ARGV[i + 6] ~= '' then  -- before the ack: a refusal leaves the head pending
    redis.call('HSETNX', held, string.sub(ARGV[i + 6], 2), id .. ' ' .. dlq_id)
  end
  local code = nil
  if delete then
    code = redis.call('XACKDEL', stream, group, 'ACKED', 'IDS', 1, id)[1]
  else
    redis.call('XACK', stream, group, id)
  end
  if delete then return {dlq_id, code} end
  return dlq_id
end

-- Whether an entry's flat field list carries the metadata block.
local function is_letter(fields)
  local names = {}
  for j = 1, #fields, 2 do names[fields[j]] = true end
  return names['x-original-stream'] and names['x-original-id'] and names['x-death-reason']
end

-- Why `dlq` is no stream of dead letters ('<type> <why>'), or nil when it may take them.
local function not_letters(stream, dlq)
  if dlq == stream then return 'stream it is the source stream itself' end
  local kind = redis.call('TYPE', dlq)['ok']
  if kind == 'none' then return nil end
  if kind ~= 'stream' then return kind .. ' it is no stream' end
  local oldest = redis.call('XRANGE', dlq, '-', '+', 'COUNT', 1)
  if #oldest == 0 then return nil end  -- an empty stream
  if not is_letter(oldest[1][2]) then
    return 'stream its oldest entry carries no dead-letter metadata'
  end
  if newest then
    local info = redis.call('XINFO', 'STREAM', dlq)
    for j = 1, #info, 2 do
      if info[j] == 'last-entry' and info[j + 1] and not is_letter(info[j + 1][2]) then
        return 'stream its newest entry carries no dead-letter metadata'
      end
    end
  end
  return nil
end

-- Why `held` is no hash of held keys ('hold:<type> <why>'), or nil when it may take them:
-- missing, or a hash whose values (one read at random) are '<head ID> <dead-letter ID>'.
local function not_holds(held, stream, dlq)
  if held == stream or held == dlq then  -- the move would XADD to it, then HSETNX
    return 'hold:stream it is the unit\'s source or dead-letter stream'
  end
  local kind = redis.call('TYPE', held)['ok']
  if kind == 'none' then return nil end
  if kind ~= 'hash' then return 'hold:' .. kind .. ' it is no hash' end
  local one = redis.call('HRANDFIELD', held, 1, 'WITHVALUES')
  if #one == 0 or string.find(one[2], '^%d+%-%d+ %d+%-%d+$') then return nil end
  return 'hold:hash its values are not <head ID> <dead-letter ID>'
end

-- A user who may not HSETNX `held` fails the call here, with that ACL error, before
-- anything of the unit is written (a script's writes are never undone: a refusal after
-- the ack would release the key). redis.acl_check_cmd is Redis 7.0+; on 6.2 the HSETNX
-- in move, before the ack, is refused with the head still pending.
local function may_hold(held)
  if redis.acl_check_cmd and not redis.acl_check_cmd('HSETNX', held, 'k', 'v') then
    redis.call('HSETNX', held, 'k', 'v')  -- refused: nothing is written
  end
end

local replies = {}
local at, k_at, u = 6, 1, 0
while k_at <= #KEYS do
  u = u + 1
  local group, consumer, source, n = ARGV[at], ARGV[at + 1], ARGV[at + 2], tonumber(ARGV[at + 3])
  local holds = ARGV[at + 4] == '1'
  local stream, dlq, held = KEYS[k_at], KEYS[k_at + 1], nil
  if holds then held = KEYS[k_at + 2] end
  local width = holds and 7 or 6
  local reply = {}
  if n > 0 and held then may_hold(held) end
  local refused = n > 0 and (not_letters(stream, dlq) or (held and not_holds(held, stream, dlq)))
  if refused then reply = {err = 'NOTLETTERS ' .. refused} else
    for k = 0, n - 1 do
      local one = move(stream, dlq, held, group, consumer, source, at + 5 + width * k)
      if failed(one) then reply = one; break end
      reply[k + 1] = one
    end
  end
  replies[u] = reply
  at = at + 5 + width * n
  k_at = k_at + (holds and 3 or 2)
end
return replies
