-- Move dead letters back to their source stream, atomically, one batch per call.
-- KEYS[1]: dead-letter stream; KEYS[2]: source stream (same hash slot, see dlq_names.py).
-- ARGV[1]: source name: only entries whose x-original-stream equals it are candidates;
-- ARGV[2], ARGV[3]: XRANGE start and end over dead-letter IDs (start may be '(<id>', exclusive);
-- ARGV[4]: examine at most this many dead-letter entries; ARGV[5]: move at most this many;
-- ARGV[6]: '1' for a dry run (match and count, write nothing), '0' to move;
-- ARGV[7]: number G of group filters, then G groups (x-original-group); then the number R of
-- reason filters, then R reasons (x-death-reason). No filter of a kind matches everything.
-- A matching entry loses its metadata block (from its last x-original-stream field to the end:
-- dead_letter.lua appends the block after the original fields, starting with that field), gets
-- x-redrive-count set to one more than before (in place if the original fields carry it, else
-- appended; a value that is no count, i.e. not ASCII digits up to 2147483647, counts as 0: the
-- count starts again), is XADDed to the source with a new ID, then XDELed from the dead-letter stream.
-- Reply: {cursor, examined, {dead-letter id, new id, ...}}: cursor is the last examined ID while
-- more may follow, '' once the range is exhausted; new id is '' in a dry run.
-- Errors before any write: WRONGTYPE if the source (or the dead-letter key) is not a stream.
local COUNTER = 'x-redrive-count'
local MAX_COUNT = 2147483647  -- recovery/counts.py MAX_CARRIED: the largest sane count

local function filter_set(at)
  local n, set = tonumber(ARGV[at]), {}
  for i = at + 1, at + n do set[ARGV[i]] = true end
  return set, n, at + n + 1
end

local groups, n_groups, next_at = filter_set(7)
local reasons, n_reasons = filter_set(next_at)
local dry = ARGV[6] == '1'

local source_type = redis.call('TYPE', KEYS[2])['ok']
if source_type ~= 'stream' and source_type ~= 'none' then
  return redis.error_reply('WRONGTYPE source ' .. ARGV[1] .. ' is a ' .. source_type)
end

-- Index of the metadata block (its x-original-stream name) and the block's first values.
local function metadata(flat)
  for i = #flat - 1, 1, -2 do
    if flat[i] == 'x-original-stream' then
      local meta = {}
      for j = i, #flat - 1, 2 do
        if meta[flat[j]] == nil then meta[flat[j]] = flat[j + 1] end
      end
      return i, meta
    end
  end
  return nil, nil
end

local function matches(meta)
  return meta ~= nil and meta['x-original-stream'] == ARGV[1]
    and (n_groups == 0 or groups[meta['x-original-group']] == true)
    and (n_reasons == 0 or reasons[meta['x-death-reason']] == true)
end

-- XADD arguments: the original fields, with the redrive counter incremented or appended.
local function redriven(flat, block_at)
  local args, counter_at = {KEYS[2], '*'}, nil
  for i = 1, block_at - 1, 2 do
    args[#args + 1] = flat[i]; args[#args + 1] = flat[i + 1]
    if flat[i] == COUNTER then counter_at = #args end
  end
  if counter_at then
    local before = args[counter_at]
    -- Only ASCII digits up to MAX_COUNT (tonumber would take '-3', ' 7', '0x10', '1e3',
    -- 'inf' and thousands of digits, and tostring would write '1e+20' back).
    local n = before:find('^%d+$') and #before <= 10 and tonumber(before) or 0
    if n > MAX_COUNT then n = 0 end
    args[counter_at] = string.format('%d', n + 1)
  else
    args[#args + 1] = COUNTER; args[#args + 1] = '1'
  end
  return args
end

local scan, max_moves = tonumber(ARGV[4]), tonumber(ARGV[5])
local entries = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[3], 'COUNT', scan)
local moved, examined, cursor = {}, 0, ''
for _, entry in ipairs(entries) do
  examined = examined + 1
  local id, flat = entry[1], entry[2]
  local block_at, meta = metadata(flat)
  if matches(meta) then
    local new_id = ''
    if not dry then
      new_id = redis.call('XADD', unpack(redriven(flat, block_at)))
      redis.call('XDEL', KEYS[1], id)
    end
    moved[#moved + 1] = id; moved[#moved + 1] = new_id
    if #moved / 2 >= max_moves then cursor = id; break end
  end
end
if cursor == '' and #entries == scan then cursor = entries[#entries][1] end
return {cursor, examined, moved}
