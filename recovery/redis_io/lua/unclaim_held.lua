-- Per-key order: give entries the job held (not handed over: an older entry of their key
-- failed or is pending elsewhere) their delivery count back as it was before this run's
-- claim, which delivered them to no application, so that a key held for several runs does
-- not push its entries to the delivery limit. Only an entry still pending on the job's
-- consumer with exactly the count the claim left is changed (XCLAIM ... RETRYCOUNT JUSTID to
-- the same consumer), so a retried task or a second call changes nothing more. Such an
-- entry deleted from the stream upstream since the claim (XCLAIM would drop it from the PEL
-- on 7.0+) is not claimed: its PEL slot is acked and its ID returned, to be reported deleted.
-- KEYS[1]: stream. ARGV[1]: group; ARGV[2]: the job's consumer; ARGV[3..]: pairs of entry ID
-- and the delivery count the claim left.
-- Reply: {the number of entries changed, the IDs found deleted...}; {-1} when the stream or
-- group is gone.
local group, consumer = ARGV[1], ARGV[2]
local reply = {0}
for i = 3, #ARGV, 2 do
  local id, count = ARGV[i], tonumber(ARGV[i + 1])
  local rows = redis.pcall('XPENDING', KEYS[1], group, id, id, 1, consumer)
  if type(rows) == 'table' and rows.err then return {-1} end
  if #rows == 1 and rows[1][4] == count and count > 0 then
    if #redis.call('XRANGE', KEYS[1], id, id) == 0 then
      redis.call('XACK', KEYS[1], group, id)
      reply[#reply + 1] = id
    else
      redis.call('XCLAIM', KEYS[1], group, consumer, 0, id, 'RETRYCOUNT', count - 1, 'JUSTID')
      reply[1] = reply[1] + 1
    end
  end
end
return reply
