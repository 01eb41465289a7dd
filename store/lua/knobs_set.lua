-- Compare-and-set of the knobs record.  KEYS[1]: knobs hash; KEYS[2]: history stream.
-- ARGV[1]: version the writer read; ARGV[2]: new values (JSON); ARGV[3]: the changes (JSON);
-- ARGV[4]: history cap.  Returns the new version, or -1 when someone wrote in between.
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if current ~= tonumber(ARGV[1]) then return -1 end
local version = current + 1
redis.call('HSET', KEYS[1], 'version', version, 'values', ARGV[2])
local t = redis.call('TIME')
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'version', version,
           'time', string.format('%d.%06d', tonumber(t[1]), tonumber(t[2])), 'changes', ARGV[3])
return version
