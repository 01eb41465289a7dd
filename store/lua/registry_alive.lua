-- Holders (of ARGV) whose heartbeat deadline is still ahead.  KEYS[1]: holders zset.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local alive = {}
for i = 1, #ARGV do
  local deadline = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if deadline and tonumber(deadline) > now_ms then alive[#alive + 1] = ARGV[i] end
end
return alive
