-- Requeue a batch of entries, atomically: each entry still pending and owned by the job's
-- consumer is appended to the target stream as a new message (its fields verbatim, without
-- an earlier copy's carried count), with x-recovery-deliveries = the deliveries to the
-- application so far, and the original is acked. One call: either both or neither.
-- KEYS[1]: source stream; KEYS[2]: target stream (the source itself, or a retry stream in
-- the same hash slot). ARGV[1]: group; ARGV[2]: the job's consumer;
-- then 2 values per entry: id, deliveries so far.
-- Reply: one element per entry: the copy's ID if requeued; 0 if the entry is no longer
-- pending or owned by ARGV[2] (left alone); -1 if it was deleted from the stream upstream
-- (acked, nothing written); -2 if it has too many fields to be re-added from a script
-- (Lua's unpack() takes at most ~8000 values): left pending, nothing written.
local MAX_VALUES = 7900
local CARRIED = 'x-recovery-deliveries'
local group, consumer = ARGV[1], ARGV[2]
local reply = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  if #redis.call('XPENDING', KEYS[1], group, id, id, 1, consumer) == 0 then
    reply[#reply + 1] = 0
  else
    local found = redis.call('XRANGE', KEYS[1], id, id)
    if #found == 0 then
      redis.call('XACK', KEYS[1], group, id)
      reply[#reply + 1] = -1
    elseif #found[1][2] + 4 > MAX_VALUES then
      reply[#reply + 1] = -2
    else
      local args = {KEYS[2], '*'}
      local fields = found[1][2]
      for j = 1, #fields, 2 do
        if fields[j] ~= CARRIED then
          args[#args + 1] = fields[j]; args[#args + 1] = fields[j + 1]
        end
      end
      args[#args + 1] = CARRIED; args[#args + 1] = ARGV[i + 1]
      local copy_id = redis.call('XADD', unpack(args))
      redis.call('XACK', KEYS[1], group, id)
      reply[#reply + 1] = copy_id
    end
  end
end
return reply
