-- Move a batch of entries from a stream's group PEL to its dead-letter stream, atomically.
-- KEYS[1]: source stream; KEYS[2]: dead-letter stream (same hash slot as KEYS[1]).
-- ARGV[1]: group; ARGV[2]: the job's consumer (only entries it owns move);
-- ARGV[3]: run id; ARGV[4]: delivery limit; ARGV[5]: death time (epoch ms); ARGV[6]: source name;
-- then 6 values per entry: id, delivery count (with a requeued copy's carried deliveries,
-- whose field is not copied), idle ms (before the claim),
-- last owner ('' if unknown), reason, handler error ('' if none).
-- Reply: one element per entry: the new dead-letter ID if moved; 0 if the entry is no longer
-- pending or owned by ARGV[2] (someone acked or claimed it: left alone); -1 if the entry was
-- deleted from the stream upstream (it is acked, so it leaves the PEL, and nothing is written);
-- -2 if the entry has too many fields to be re-added from a script (Lua's unpack() takes at
-- most ~8000 values, i.e. ~3950 fields): left pending, nothing is written.
local MAX_VALUES = 7900
local group, consumer = ARGV[1], ARGV[2]
local reply = {}
for i = 7, #ARGV, 6 do
  local id = ARGV[i]
  local owned = redis.call('XPENDING', KEYS[1], group, id, id, 1, consumer)
  if #owned == 0 then
    reply[#reply + 1] = 0
  else
    local found = redis.call('XRANGE', KEYS[1], id, id)
    if #found == 0 then
      redis.call('XACK', KEYS[1], group, id)
      reply[#reply + 1] = -1
    elseif #found[1][2] + 26 > MAX_VALUES then
      reply[#reply + 1] = -2
    else
      local args = {KEYS[2], '*'}
      local fields = found[1][2]
      for j = 1, #fields, 2 do  -- verbatim, but a requeued copy's carried count (see meta)
        if fields[j] ~= 'x-recovery-deliveries' then
          args[#args + 1] = fields[j]; args[#args + 1] = fields[j + 1]
        end
      end
      local meta = {
        'x-original-stream', ARGV[6], 'x-original-group', group, 'x-original-id', id,
        'x-delivery-count', ARGV[i + 1], 'x-delivery-limit', ARGV[4], 'x-idle-ms', ARGV[i + 2],
        'x-death-reason', ARGV[i + 4], 'x-death-time', ARGV[5], 'x-run-id', ARGV[3]}
      for _, v in ipairs(meta) do args[#args + 1] = v end
      if ARGV[i + 3] ~= '' then
        args[#args + 1] = 'x-original-consumer'; args[#args + 1] = ARGV[i + 3]
      end
      if ARGV[i + 5] ~= '' then
        args[#args + 1] = 'x-exception-message'; args[#args + 1] = ARGV[i + 5]
      end
      local dlq_id = redis.call('XADD', unpack(args))
      redis.call('XACK', KEYS[1], group, id)
      reply[#reply + 1] = dlq_id
    end
  end
end
return reply
