-- Publish a run's description and keep the newest ARGV[3] of them.  KEYS[1]: run descriptions hash
-- (run id -> JSON).  ARGV: run id, JSON, cap.  Run ids start with their UTC start time
-- (runtime.runs.runfile.RunInfo), so the smallest ids are the oldest runs.  Returns how many were trimmed.
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local cap = tonumber(ARGV[3])
local n = redis.call('HLEN', KEYS[1])
if n <= cap then
  return 0
end
local ids = redis.call('HKEYS', KEYS[1])
table.sort(ids)
for i = 1, n - cap do
  redis.call('HDEL', KEYS[1], ids[i])
end
return n - cap
