-- Record lease/escrow entries of one holder and (re)start its heartbeat (deadline in server time).
-- KEYS[1]: entries hash (request id -> "holder|stages|reuse|escrow"); KEYS[2]: holders zset.
-- ARGV[1]: holder; ARGV[2]: ttl in ms; ARGV[3..]: request id, entry, request id, entry, ...
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[2]), ARGV[1])
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
return now_ms
