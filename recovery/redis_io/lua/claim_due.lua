-- One step of a claim under a backoff schedule, atomically: read a page of the group's PEL
-- (XPENDING ... IDLE), choose the entries due, and XCLAIM exactly those for the job's consumer,
-- so nothing can change between the choice and the claim.
-- KEYS[1]: stream; KEYS[2] and KEYS[3], when given: a cursor shared by the tasks that claim
-- one PEL together, and the list of the ranges this task's part took from it. The cursor's
-- value is where the next step reads from ('0-0', then an exclusive '(<id>'; 'done' once a
-- read came back short; a missing key reads as 'done'): the step reads from it, in place
-- of ARGV[4], moves it on and appends its range to the list ('<start> <last id read>', or
-- '<start> +' for the last), all in the same atomic call, so no two steps read the same
-- rows and a part's later attempts know every range its earlier ones took.
-- ARGV[1]: group; ARGV[2]: the job's consumer; ARGV[3]: min idle ms (the base wait);
-- ARGV[4]: the first ID to read (inclusive); ARGV[5]: PEL rows to read (COUNT);
-- ARGV[6]: factor; ARGV[7]: the longest wait (ms); ARGV[8]: the delivery limit;
-- ARGV[9]: the last ID to read (inclusive, or '+'; without a shared cursor).
-- An entry delivered k times (its PEL count) is due once idle min_idle * factor^(k-1) ms, at
-- most the longest wait; due at min_idle whatever k: an entry whose next delivery exceeds the
-- limit (it is dead-lettered, waiting serves nobody) and one the job's consumer owns (taken
-- again, as XAUTOCLAIM would). recovery/executor/claim/backoff.py states the same rule in Python.
-- Reply: {rows, own, claimed, deleted, unresolved, not_due, due_in}:
--   rows: the page as found, before the claim: {id, owner, idle ms, count} each;
--   own: {} or the job consumer's first own row at or after ARGV[4] (any idle time);
--   claimed: the IDs XCLAIM claimed, in PEL order, each with one more delivery (XCLAIM
--     ... JUSTID RETRYCOUNT <count + 1>: IDs only, their fields are read by the caller;
--     6.2 claims an entry deleted upstream all the same: the caller finds it gone);
--   deleted: IDs chosen but gone from the stream (7.0+: XCLAIM dropped them from the PEL);
--   unresolved: chosen IDs XCLAIM neither returned nor found deleted (never seen; a guard);
--   not_due: rows left alone; due_in: ms until the first of them is due (-1: none);
--   with a shared cursor, also the range it appended to the list ('done': nothing read).
local group, consumer = ARGV[1], ARGV[2]
local min_idle, start, page = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local factor, cap, limit = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local chunk = 1000  -- IDs per XCLAIM: unpack() handles at most ~8000 values
-- A count this large (XNACK FATAL sets the maximum) or negative (a claim wrapped it) is no
-- exact Lua number: such entries are claimed without RETRYCOUNT (JUSTID leaves the count as
-- it is); the caller reads them as the maximum count.
local EXACT = 2^53

local shared, finish, taken = KEYS[2], ARGV[9] or '+', 'done'
if shared then
  start = redis.call('GET', shared) or 'done'
  if start == 'done' then return {{}, {}, {}, {}, 0, 0, -1, taken} end
end
local rows = redis.call('XPENDING', KEYS[1], group, 'IDLE', min_idle, start, finish, page)
if shared then
  local after, last = 'done', '+'
  if #rows >= page then
    last = rows[#rows][1]
    after = '(' .. last
  end
  redis.call('SET', shared, after, 'KEEPTTL')
  taken = start .. ' ' .. last
  if redis.call('RPUSH', KEYS[3], taken) == 1 then
    redis.call('PEXPIRE', KEYS[3], math.max(redis.call('PTTL', shared), 1000))
  end
end
local own = redis.call('XPENDING', KEYS[1], group, start, finish, 1, consumer)

local due, not_due, due_in = {}, 0, -1
for _, row in ipairs(rows) do
  local idle, count = row[3], row[4]
  local wait = min_idle
  if row[2] ~= consumer and count < limit and count > 1 then
    wait = math.min(min_idle * factor ^ (count - 1), cap)
  end
  if idle < 0 or idle >= wait then  -- -1: XNACKed (8.8), given up by its consumer: due
    due[#due + 1] = row
  else
    not_due = not_due + 1
    local left = math.ceil(wait - idle)
    if due_in < 0 or left < due_in then due_in = left end
  end
end

-- JUSTID leaves the delivery count alone: RETRYCOUNT sets it one higher, as a claim with the
-- entries would, so the due IDs go in one XCLAIM per count (at most `chunk` IDs each).
-- min-idle 0: the choice above is the guard, and nothing runs between it and the claim.
local by_count, counts = {}, {}
for _, row in ipairs(due) do
  local count = row[4]
  if count < 0 or count + 1 >= EXACT then count = -1 end
  local ids = by_count[count]
  if not ids then
    ids = {}
    by_count[count] = ids
    counts[#counts + 1] = count
  end
  ids[#ids + 1] = row[1]
end
local got = {}
for _, count in ipairs(counts) do
  local ids = by_count[count]
  for first = 1, #ids, chunk do
    local call = {'XCLAIM', KEYS[1], group, consumer, 0}
    for i = first, math.min(first + chunk - 1, #ids) do call[#call + 1] = ids[i] end
    if count >= 0 then
      call[#call + 1] = 'RETRYCOUNT'
      call[#call + 1] = string.format('%d', count + 1)
    end
    call[#call + 1] = 'JUSTID'
    for _, id in ipairs(redis.call(unpack(call))) do got[id] = true end
  end
end

local claimed, deleted, unresolved = {}, {}, 0
for _, row in ipairs(due) do
  local id = row[1]
  if got[id] then
    claimed[#claimed + 1] = id
  elseif #redis.call('XRANGE', KEYS[1], id, id) == 0 then  -- 7.0+ dropped it from the PEL
    deleted[#deleted + 1] = id
  else
    unresolved = unresolved + 1
  end
end
return {rows, own, claimed, deleted, unresolved, not_due, due_in, taken}
