-- One stage's attach (+1) and detach (-1) events; a count never goes below zero.
-- KEYS[1]: the stage's hint hash; KEYS[2]: the set of stages with a hint hash.
-- ARGV[1]: stage number; ARGV[2]/ARGV[3]: attached/detached hashes packed as 8-byte words.
local key, a, d = KEYS[1], ARGV[2], ARGV[3]
redis.call('SADD', KEYS[2], ARGV[1])
for i = 0, #a / 8 - 1 do
  redis.call('HINCRBY', key, string.sub(a, 8 * i + 1, 8 * i + 8), 1)
end
for i = 0, #d / 8 - 1 do
  local f = string.sub(d, 8 * i + 1, 8 * i + 8)
  if redis.call('HINCRBY', key, f, -1) <= 0 then redis.call('HDEL', key, f) end
end
return #a / 8 + #d / 8
