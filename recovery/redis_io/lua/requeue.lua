-- Requeue a batch of entries of one unit, atomically: each entry still pending and owned by
-- the job's consumer is appended to the target stream as a new message, with the fields the
-- caller sends (the entry's fields as the claim read them, byte for byte, without an earlier
-- copy's carried count, then x-recovery-deliveries = its deliveries to the application so
-- far); the originals are then acked. One call: for every entry, both or neither.
-- KEYS[1]: source stream; KEYS[2]: target stream (the source itself, or a retry stream in
-- the same hash slot). ARGV[1]: group; ARGV[2]: the job's consumer; ARGV[3], ARGV[4]: the
-- smallest and the largest ID of the batch; ARGV[5]: '1' to ack the originals with XACKDEL
-- ... ACKED (Redis 8.2+: each is also deleted from the source unless another group still
-- references it), '0' with XACK; then per entry: id, n, and the n values of the copy's fields
-- (name, value, name, value, ...).
-- Reply: one element per entry: the copy's ID if requeued (with ARGV[5] '1': {the copy's ID,
-- XACKDEL's code: 1 deleted, 2 kept because another group still references it}); 0 if the entry is no longer
-- pending or owned by ARGV[2] (left alone); -2 if it has too many fields to be re-added from
-- a script (Lua's unpack() takes at most ~8000 values): left pending, nothing written.
-- Or the error 'NOTLETTERS <type> it is no stream' when the target (not the source) is a
-- key of another type, 'NOTLETTERS stream it holds dead letters' when it is a stream whose
-- oldest entry carries the dead-letter metadata block (copies would mix with the letters):
-- nothing is written or acked.
local MAX_VALUES = 7900
if KEYS[2] ~= KEYS[1] then
  local kind = redis.call('TYPE', KEYS[2])['ok']
  if kind ~= 'stream' and kind ~= 'none' then
    return redis.error_reply('NOTLETTERS ' .. kind .. ' it is no stream')
  end
  if kind == 'stream' then
    local oldest = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)
    local names = {}
    if #oldest > 0 then
      for j = 1, #oldest[1][2], 2 do names[oldest[1][2][j]] = true end
    end
    if names['x-original-stream'] and names['x-original-id'] and names['x-death-reason'] then
      return redis.error_reply('NOTLETTERS stream it holds dead letters')
    end
  end
end
local page, chunk = 1000, 1000  -- unpack() handles at most ~8000 values
local group, consumer = ARGV[1], ARGV[2]
local owned = {}  -- one range read of the job consumer's entries, not one read per entry
local start = ARGV[3]
while true do
  local rows = redis.call('XPENDING', KEYS[1], group, start, ARGV[4], page, consumer)
  for _, row in ipairs(rows) do owned[row[1]] = true end
  if #rows < page then break end
  start = '(' .. rows[#rows][1]
end
local reply, moved, at = {}, {}, {}  -- at[k]: the reply element of moved[k]
local delete = ARGV[5] == '1'
local i = 6
while i <= #ARGV do
  local id, n = ARGV[i], tonumber(ARGV[i + 1])
  if not owned[id] then
    reply[#reply + 1] = 0
  elseif n + 2 > MAX_VALUES then
    reply[#reply + 1] = -2
  else
    reply[#reply + 1] = redis.call('XADD', KEYS[2], '*', unpack(ARGV, i + 2, i + 1 + n))
    moved[#moved + 1] = id
    at[#moved] = #reply
  end
  i = i + 2 + n
end
for k = 1, #moved, chunk do
  local last = math.min(k + chunk - 1, #moved)
  if delete then
    local codes = redis.call('XACKDEL', KEYS[1], group, 'ACKED', 'IDS', last - k + 1,
                             unpack(moved, k, last))
    for j = k, last do reply[at[j]] = {reply[at[j]], codes[j - k + 1]} end
  else
    redis.call('XACK', KEYS[1], group, unpack(moved, k, last))
  end
end
return reply
