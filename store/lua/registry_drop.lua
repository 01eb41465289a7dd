-- Drop entries only if the caller holds them.  KEYS[1]: entries hash.  ARGV[1]: holder;
-- ARGV[2..]: request ids.  Returns how many were dropped.
local dropped = 0
for i = 2, #ARGV do
  local entry = redis.call('HGET', KEYS[1], ARGV[i])
  if entry and string.sub(entry, 1, #ARGV[1] + 1) == ARGV[1] .. '|' then
    redis.call('HDEL', KEYS[1], ARGV[i])
    dropped = dropped + 1
  end
end
return dropped
