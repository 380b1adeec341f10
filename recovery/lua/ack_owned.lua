-- Ack the entries of a batch that are still pending and owned by the job's consumer.
-- KEYS[1]: stream. ARGV[1]: group; ARGV[2]: the job's consumer; ARGV[3..]: entry IDs.
-- Reply: one integer per ID: 1 acked; 0 left alone (no longer pending, or another owner).
local group, consumer = ARGV[1], ARGV[2]
local reply = {}
local owned = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if #redis.call('XPENDING', KEYS[1], group, id, id, 1, consumer) == 1 then
    owned[#owned + 1] = id
    reply[#reply + 1] = 1
  else
    reply[#reply + 1] = 0
  end
end
if #owned > 0 then
  redis.call('XACK', KEYS[1], group, unpack(owned))
end
return reply
