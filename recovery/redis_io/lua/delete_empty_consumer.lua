-- Delete a consumer from a group only if it has no pending entries (XGROUP DELCONSUMER would
-- drop them from the PEL for good).
-- KEYS[1]: stream. ARGV[1]: group; ARGV[2]: consumer.
-- Reply: 1 deleted; 0 kept (it still owns pending entries).
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then
  return 0
end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
