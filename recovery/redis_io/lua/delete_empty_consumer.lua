-- Per stream and group: read the group's PEL summary once, then delete the given consumers
-- of that group that own no pending entry (XGROUP DELCONSUMER would drop them from the PEL
-- for good; the summary lists exactly the consumers that own some, and nothing can change
-- between the read and the deletions: a script runs atomically).
-- KEYS[i]: a stream. ARGV, per key in order: its group, the number n of consumers, then the
-- n consumer names.
-- Reply: one array per key: {summary, r_1, ..., r_n}. summary: the XPENDING <stream> <group>
-- reply as read before the deletions ({total, first id, last id, {{consumer, count}, ...}}),
-- or the error that key's stream or group answered (NOGROUP, WRONGTYPE); r_j: 1 deleted,
-- 0 kept (it owns pending entries), or that same error. The other keys are done all the same.
local replies = {}
local at = 1
for i, stream in ipairs(KEYS) do
  local group, n = ARGV[at], tonumber(ARGV[at + 1])
  local summary = redis.pcall('XPENDING', stream, group)
  local owners = {}
  if not summary.err and summary[4] then
    for _, row in ipairs(summary[4]) do
      owners[row[1]] = true
    end
  end
  local reply = {summary}
  for j = 1, n do
    local consumer = ARGV[at + 1 + j]
    if summary.err then
      reply[j + 1] = summary
    elseif owners[consumer] then
      reply[j + 1] = 0
    else
      local gone = redis.pcall('XGROUP', 'DELCONSUMER', stream, group, consumer)
      reply[j + 1] = type(gone) == 'table' and gone or 1  -- a table: the error reply
    end
  end
  replies[i] = reply
  at = at + 2 + n
end
return replies
