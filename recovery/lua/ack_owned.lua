-- Ack the entries of a batch that are still pending and owned by the job's consumer.
-- KEYS[1]: stream. ARGV[1]: group; ARGV[2]: the job's consumer;
-- ARGV[3..]: entry IDs in ascending stream-ID order (the caller sorts them).
-- Ownership is read with XPENDING over [first ID, last ID] filtered by the consumer, in pages,
-- instead of one XPENDING per ID: for a batch of neighbouring IDs that is one cheap call.
-- Reply: one integer per ID: 1 acked; 0 left alone (no longer pending, or another owner).
local group, consumer = ARGV[1], ARGV[2]
local page = 1000
local owned = {}
local start = ARGV[3]
while true do
  local rows = redis.call('XPENDING', KEYS[1], group, start, ARGV[#ARGV], page, consumer)
  for _, row in ipairs(rows) do owned[row[1]] = true end
  if #rows < page then break end
  start = '(' .. rows[#rows][1]
end
local reply, to_ack = {}, {}
for i = 3, #ARGV do
  if owned[ARGV[i]] then
    to_ack[#to_ack + 1] = ARGV[i]
    reply[#reply + 1] = 1
  else
    reply[#reply + 1] = 0
  end
end
for i = 1, #to_ack, 1000 do
  redis.call('XACK', KEYS[1], group, unpack(to_ack, i, math.min(i + 999, #to_ack)))
end
return reply
