-- Seed one slice of a stream's stuck backlog, all server-side (a few calls per big stream,
-- so that no call keeps Redis busy for long).
-- KEYS[1]: stream (must not exist before the first slice). ARGV[1]: group; ARGV[2]: consumer
-- that never acks; ARGV[3]: number of entries in this slice; ARGV[4]: idle time to give them
-- (ms); ARGV[5]: delivery count of ordinary entries; ARGV[6]: delivery count of over-limit
-- entries; ARGV[7]: over-limit fraction (0..1); ARGV[8]: payload padding (a string of ~140
-- bytes); ARGV[9]: the stream-wide number of the slice's first entry (1 for the first slice,
-- which also creates the group); ARGV[10]: the fraction (0..1) of the other entries that get
-- ARGV[11] deliveries instead of ARGV[5] (not due yet under a backoff schedule); ARGV[12]: a
-- number of ordering keys k above 0 gives entry i a fifth field, 'account' = 'a<i mod k>'
-- (keys interleaved across the stream, for order.key_field = account), 0 none.
-- Entry i (1-based, stream-wide) is over the limit when floor(i * f) > floor((i - 1) * f):
-- exactly floor(n * f) of them, evenly spread; the next rule with ARGV[10] picks, among the
-- others, those delivered ARGV[11] times.
-- Reply: {the IDs of the over-limit entries, those of the ARGV[11]-times delivered ones}, each
-- in stream order.
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local n, idle = tonumber(ARGV[3]), ARGV[4]
local fraction, pad, first = tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9])
local later = tonumber(ARGV[10] or '0')
local keys = tonumber(ARGV[12] or '0')
local chunk = 1000
local normal, over, waiting = {}, {}, {}
for i = first, first + n - 1 do
  local fields = {'order_id', stream .. '-' .. i, 'amount_cents', tostring(1000 + i % 997),
    'currency', 'EUR', 'payload', pad}
  if keys > 0 then
    fields[#fields + 1] = 'account'; fields[#fields + 1] = 'a' .. (i % keys)
  end
  local id = redis.call('XADD', stream, '*', unpack(fields))
  if math.floor(i * fraction) > math.floor((i - 1) * fraction) then
    over[#over + 1] = id
  elseif math.floor(i * later) > math.floor((i - 1) * later) then
    waiting[#waiting + 1] = id
  else
    normal[#normal + 1] = id
  end
end
if first == 1 then redis.call('XGROUP', 'CREATE', stream, group, '0') end
-- Deliver everything to the consumer (it becomes pending), as a crashed worker leaves it.
local delivered = 0
while delivered < n do
  local reply = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT',
    math.min(chunk, n - delivered), 'STREAMS', stream, '>')
  delivered = delivered + #reply[1][2]
end
-- Age them and set their delivery counts exactly (JUSTID: no count increment).
local function age(ids, count)
  for start = 1, #ids, chunk do
    local args = {stream, group, consumer, 0}
    for j = start, math.min(#ids, start + chunk - 1) do args[#args + 1] = ids[j] end
    args[#args + 1] = 'IDLE'; args[#args + 1] = idle
    args[#args + 1] = 'RETRYCOUNT'; args[#args + 1] = count
    args[#args + 1] = 'JUSTID'
    redis.call('XCLAIM', unpack(args))
  end
end
age(normal, ARGV[5])
age(over, ARGV[6])
age(waiting, ARGV[11] or ARGV[5])
return {over, waiting}
