-- A page of a stream's entries bounded by bytes as well as by count (read-only).
-- KEYS[1]: the stream. ARGV[1]: 'XRANGE' (oldest first) or 'XREVRANGE' (newest first);
-- ARGV[2], ARGV[3]: the low and high ID bounds ('-', '+', an ID, or '(<id>' to exclude it);
-- ARGV[4]: at most this many entries; ARGV[5]: a byte budget (names and values summed).
-- Entries are read one at a time, so at most one entry past the budget is ever held here:
-- a page of letters holding tens of megabytes each never becomes a reply of gigabytes (whose
-- output buffer would double the server's memory). At least one entry is returned when any
-- is in range, however large.
-- Reply: {entries, more}: entries as XRANGE gives them ({id, {name, value, ...}}), in the
-- order asked; more = 1 when it stopped at the count or the budget (more may follow), else 0.
local command, low, high = ARGV[1], ARGV[2], ARGV[3]
local count, budget = tonumber(ARGV[4]), tonumber(ARGV[5])
local entries, bytes = {}, 0
while #entries < count do
  local got
  if command == 'XRANGE' then
    got = redis.call('XRANGE', KEYS[1], low, high, 'COUNT', 1)
  else
    got = redis.call('XREVRANGE', KEYS[1], high, low, 'COUNT', 1)
  end
  if #got == 0 then return {entries, 0} end
  local entry = got[1]
  entries[#entries + 1] = entry
  for _, part in ipairs(entry[2]) do bytes = bytes + #part end
  if command == 'XRANGE' then low = '(' .. entry[1] else high = '(' .. entry[1] end
  if bytes >= budget then break end
end
return {entries, 1}
