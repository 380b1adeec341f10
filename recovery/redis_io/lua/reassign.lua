-- Reassign a batch of entries to live consumers of their group, atomically: each entry still
-- pending and owned by the job's consumer is claimed for its new owner (XCLAIM ... JUSTID, so
-- the claim itself adds no delivery) with its delivery count set back to the deliveries to
-- the application so far (RETRYCOUNT: the job's own claim is not one); the new owner sees it
-- when it reads its pending entries (XREADGROUP ... 0), which counts one delivery.
-- KEYS[1]: stream. ARGV[1]: group; ARGV[2]: the job's consumer;
-- then 3 values per entry: id, new owner, delivery count to set.
-- Reply: one integer per entry: 1 reassigned; 0 no longer pending or owned by ARGV[2] (left
-- alone); -1 deleted from the stream upstream (acked, so it leaves the PEL).
local group, consumer = ARGV[1], ARGV[2]
local reply = {}
for i = 3, #ARGV, 3 do
  local id = ARGV[i]
  if #redis.call('XPENDING', KEYS[1], group, id, id, 1, consumer) == 0 then
    reply[#reply + 1] = 0
  elseif #redis.call('XRANGE', KEYS[1], id, id) == 0 then
    redis.call('XACK', KEYS[1], group, id)
    reply[#reply + 1] = -1
  else
    redis.call('XCLAIM', KEYS[1], group, ARGV[i + 1], 0, id, 'RETRYCOUNT', ARGV[i + 2], 'JUSTID')
    reply[#reply + 1] = 1
  end
end
return reply
