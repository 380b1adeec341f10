-- Delete consumers from their groups, each only if it has no pending entries (XGROUP
-- DELCONSUMER would drop them from the PEL for good).
-- KEYS[i]: a stream. ARGV[2i-1]: its group; ARGV[2i]: the consumer.
-- Reply: one element per key: 1 deleted; 0 kept (it still owns pending entries); or the
-- error that key's stream or group answered (NOGROUP, WRONGTYPE), the others done all the
-- same.
local replies = {}
for i, stream in ipairs(KEYS) do
  local group, consumer = ARGV[2 * i - 1], ARGV[2 * i]
  local own = redis.pcall('XPENDING', stream, group, '-', '+', 1, consumer)
  if own.err then
    replies[i] = own
  elseif #own > 0 then
    replies[i] = 0
  else
    local gone = redis.pcall('XGROUP', 'DELCONSUMER', stream, group, consumer)
    replies[i] = type(gone) == 'table' and gone or 1  -- a table: the error reply
  end
end
return replies
