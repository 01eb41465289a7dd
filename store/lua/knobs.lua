-- The knobs record with the deployment record it is checked against: read, or compare-and-set.
-- KEYS[1]: knobs hash; KEYS[2]: knob history stream; KEYS[3]: deployment (a JSON string).
--
-- The script judges nothing: it reads entries as they are (another client may have written a key
-- of the wrong type) and the client decides what they mean. A write first checks that what the
-- client validated against is still there, then checks every key's type, and only then writes, so
-- it either completes with its history or changes nothing.
--
-- ARGV[1] = 'read' returns the state {knobs type, version, values, deployment type, deployment}
-- ('' where absent). ARGV[1] = 'write': ARGV[2..6] the state the writer read; ARGV[7] the new
-- version; ARGV[8] the new values (JSON); ARGV[9] the changes (JSON); ARGV[10] the history cap.
-- Returns {version, 1 if a history of the wrong type was replaced else 0}, {-1} when the state
-- changed since the writer read it, or {-2} (nothing written) when the new version is not an integer
-- in [1, 2^53 - 1]: Lua's numbers are doubles, and beyond 2^53 a version no longer counts (and
-- beyond 2^63 its integer reply wraps negative, which a writer took for "changed, try again").
local MAX_VERSION = 9007199254740991  -- 2^53 - 1 (store.base.KNOBS_VERSION_MAX)

local function version_in_bounds(text)
  if #text > 16 or not string.match(text, '^[1-9]%d*$') then return false end
  return tonumber(text) <= MAX_VERSION
end
local function state()
  local knobs_type = redis.call('TYPE', KEYS[1]).ok
  local version, values = '', ''
  if knobs_type == 'hash' then
    version = redis.call('HGET', KEYS[1], 'version') or ''
    values = redis.call('HGET', KEYS[1], 'values') or ''
  end
  local deployment_type = redis.call('TYPE', KEYS[3]).ok
  local deployment = ''
  if deployment_type == 'string' then deployment = redis.call('GET', KEYS[3]) end
  return {knobs_type, version, values, deployment_type, deployment}
end

local now = state()
if ARGV[1] == 'read' then return now end
if not version_in_bounds(ARGV[7]) then return {-2} end
for i = 1, 5 do
  if now[i] ~= ARGV[i + 1] then return {-1} end
end
if now[1] ~= 'hash' and now[1] ~= 'none' then redis.call('DEL', KEYS[1]) end
local history_type = redis.call('TYPE', KEYS[2]).ok
local replaced = 0
if history_type ~= 'stream' and history_type ~= 'none' then
  redis.call('DEL', KEYS[2])
  replaced = 1
end
redis.call('HSET', KEYS[1], 'version', ARGV[7], 'values', ARGV[8])
local t = redis.call('TIME')
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[10], '*', 'version', ARGV[7],
           'time', string.format('%d.%06d', tonumber(t[1]), tonumber(t[2])), 'changes', ARGV[9])
return {tonumber(ARGV[7]), replaced}
