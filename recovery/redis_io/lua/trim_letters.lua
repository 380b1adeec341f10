-- Retention of one dead-letter stream, one step per call: check its oldest entries and trim
-- (XTRIM MINID =, exact) only those that are letters of a selected source, atomically.
-- KEYS[1]: the dead-letter stream (the only key: runs on its node of a Redis Cluster).
-- ARGV[1]: the first ID to look at in a dry run (inclusive; '-' for the stream's start); a
-- trim always starts at the stream's start, so XTRIM never takes an entry it did not check;
-- ARGV[2]: the limits' cut: entries with an ID below it (exclusive) are past a limit;
-- ARGV[3]: look at most at this many entries in this call;
-- ARGV[4]: '1' for a dry run (check and count, trim nothing), '0' to trim;
-- ARGV[5]: number S of selected sources, then S source names (x-original-stream values);
-- then the number G of selected groups, then G group names (x-original-group values; G = 0:
-- every group).
-- An entry is a letter when it carries the metadata block (dead_letter.lua: its last
-- x-original-stream field starts it; read.py's rule). The walk goes oldest first and stops at
-- the first entry below the cut that is not a letter, or a letter of a source or group not
-- selected: that entry and everything after it stay (XTRIM cannot skip an entry).
-- Reply: {checked, last, bound, why, source}: checked: the entries that pass (trimmed unless a
-- dry run); last: the newest of them ('' when none); bound: the MINID trimmed to (every entry
-- below it passed); why: 'cut' (every entry below the cut passed: done), 'more' (the budget
-- ran out: call again from bound), 'not-a-letter', 'source-not-selected' or
-- 'group-not-selected' (stopped at bound); source: the x-original-stream (or, for a group,
-- the x-original-group) of the letter it stopped at ('' otherwise).
local key, cut = KEYS[1], ARGV[2]
local budget, dry = tonumber(ARGV[3]), ARGV[4] == '1'
local start = dry and ARGV[1] or '-'
local selected, groups = {}, nil
local n_sources = tonumber(ARGV[5])
for i = 6, 5 + n_sources do selected[ARGV[i]] = true end
local n_groups = tonumber(ARGV[6 + n_sources])
if n_groups > 0 then
  groups = {}
  for i = 7 + n_sources, 6 + n_sources + n_groups do groups[ARGV[i]] = true end
end

-- The x-original-stream value of an entry's metadata block (nil without a block) and the
-- x-original-group after it (the block's own, nil if missing).
local function source_of(flat)
  for i = #flat - 1, 1, -2 do
    if flat[i] == 'x-original-stream' then
      for j = i + 2, #flat - 1, 2 do
        if flat[j] == 'x-original-group' then return flat[i + 1], flat[j + 1] end
      end
      return flat[i + 1], nil
    end
  end
  return nil, nil
end

-- One more than the budget: the entry after the budget bounds the trim when it runs out.
local entries = redis.call('XRANGE', key, start, '(' .. cut, 'COUNT', budget + 1)
local checked, last, bound, why, stopped_source = 0, '', cut, 'cut', ''
for i, entry in ipairs(entries) do
  if i > budget then
    bound, why = entry[1], 'more'
    break
  end
  local source, group = source_of(entry[2])
  if source == nil then
    bound, why = entry[1], 'not-a-letter'
    break
  end
  if not selected[source] then
    bound, why, stopped_source = entry[1], 'source-not-selected', source
    break
  end
  if groups and not (group and groups[group]) then
    bound, why, stopped_source = entry[1], 'group-not-selected', group or ''
    break
  end
  checked, last = checked + 1, entry[1]
end
if checked > 0 and not dry then
  checked = redis.call('XTRIM', key, 'MINID', '=', bound)
end
return {checked, last, bound, why, stopped_source}
