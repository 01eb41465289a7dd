-- Remove and return entries whose holder's heartbeat deadline has passed (or who never had one),
-- and forget expired holders.  KEYS[1]: entries hash; KEYS[2]: holders zset.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local dead = {}
for i = 1, #all, 2 do
  local entry = all[i + 1]
  -- An entry another client wrote without a holder field has no heartbeat: reaped (the client
  -- skips it as malformed) rather than an error that stops every reap.
  local holder = string.match(entry, '^([^|]*)|')
  local deadline = holder and redis.call('ZSCORE', KEYS[2], holder)
  if not deadline or tonumber(deadline) <= now_ms then
    redis.call('HDEL', KEYS[1], all[i])
    dead[#dead + 1] = all[i]
    dead[#dead + 1] = entry
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
return dead
