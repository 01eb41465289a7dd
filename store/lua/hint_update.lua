-- One stage's attach (+1) and detach (-1) events; a count never goes below zero.
-- KEYS[1]: the stage's hint hash; KEYS[2]: the set of stages with a hint hash.
-- ARGV[1]: stage number; ARGV[2]/ARGV[3]: attached/detached hashes packed as 8-byte words.
-- A count another client overwrote with what is not an integer (or one at the edge of 2^63) is
-- reset, never an error that fails the whole update: an attach makes it 1, a detach drops it.
local key, a, d = KEYS[1], ARGV[2], ARGV[3]
local function add(f, n)
  local count = redis.pcall('HINCRBY', key, f, n)
  if type(count) == 'table' and count.err then
    if n > 0 then
      redis.call('HSET', key, f, n)
      return n
    end
    redis.call('HDEL', key, f)
    return 0
  end
  return count
end
redis.call('SADD', KEYS[2], ARGV[1])
for i = 0, #a / 8 - 1 do
  add(string.sub(a, 8 * i + 1, 8 * i + 8), 1)
end
for i = 0, #d / 8 - 1 do
  local f = string.sub(d, 8 * i + 1, 8 * i + 8)
  if add(f, -1) <= 0 then redis.call('HDEL', key, f) end
end
return #a / 8 + #d / 8
