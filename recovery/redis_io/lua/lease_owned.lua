-- Renew the job's lease on a batch just before the handler sees it: the entries still pending
-- and owned by the job's consumer get their idle time reset to 0 (XCLAIM ... JUSTID keeps the
-- delivery count), so that no run claiming with a longer min-idle time than the handler call
-- takes them meanwhile. Entries idle less than ARGV[3] ms (claimed or renewed moments ago)
-- already hold a fresh lease and are not claimed again, which saves an XCLAIM per entry on the
-- common path. An entry no longer pending or owned by another consumer (acked by someone, or
-- claimed by another run) is left alone; one deleted from the stream is acked.
-- KEYS[1]: stream. ARGV[1]: group; ARGV[2]: the job's consumer; ARGV[3]: fresh lease ms;
-- ARGV[4..]: entry IDs in ascending stream-ID order (the caller sorts them).
-- Reply: one integer per ID: 1 leased (hand it to the handler); 0 left alone;
-- -1 deleted upstream (acked, so it leaves the PEL; never handed to the handler).
local group, consumer, fresh_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local page, chunk = 1000, 1000  -- unpack() handles at most ~8000 values
local owned = {}
local start = ARGV[4]
while true do
  local rows = redis.call('XPENDING', KEYS[1], group, start, ARGV[#ARGV], page, consumer)
  for _, row in ipairs(rows) do owned[row[1]] = row[3] end  -- id -> idle ms
  if #rows < page then break end
  start = '(' .. rows[#rows][1]
end
local mine, fresh = {}, {}
for i = 4, #ARGV do
  local idle = owned[ARGV[i]]
  if idle and idle < fresh_ms then
    fresh[ARGV[i]] = true
  elseif idle then
    mine[#mine + 1] = ARGV[i]
  end
end
local renewed = {}
for i = 1, #mine, chunk do
  local args = {KEYS[1], group, consumer, 0}
  for j = i, math.min(i + chunk - 1, #mine) do args[#args + 1] = mine[j] end
  args[#args + 1] = 'JUSTID'
  -- XCLAIM skips entries deleted from the stream (7.2+ also drops them from the PEL).
  for _, id in ipairs(redis.call('XCLAIM', unpack(args))) do renewed[id] = true end
end
local reply, deleted = {}, {}
for i = 4, #ARGV do
  local id = ARGV[i]
  if renewed[id] or fresh[id] then
    reply[#reply + 1] = 1
  elseif owned[id] then
    deleted[#deleted + 1] = id
    reply[#reply + 1] = -1
  else
    reply[#reply + 1] = 0
  end
end
for i = 1, #deleted, chunk do
  redis.call('XACK', KEYS[1], group, unpack(deleted, i, math.min(i + chunk - 1, #deleted)))
end
return reply
