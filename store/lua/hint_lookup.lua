-- Longest resident prefix per prompt and stage, by exponential probe + binary search, each stage's
-- search starting at the stage before's answer.
-- KEYS: one hint hash per stage.  ARGV[1]: number of prompts; ARGV[1+p]: prompt p's block
-- hashes packed as 8-byte little-endian words.  Returns, per prompt, one length per stage
-- then the number of probes.  Probe order matches store/probe.py exactly.
local function resident(key, packed, i)
  return redis.call('HEXISTS', key, string.sub(packed, 8 * i + 1, 8 * i + 8)) == 1
end

-- guess > 0: the stage before's answer, confirmed in two probes where the stages agree; a wrong
-- guess only bounds the search (the answer is exact whatever the guess).
local function longest(key, packed, m, guess)
  local probes, lo = 0, 0
  if guess > 0 and guess <= m then
    probes = 1
    if not resident(key, packed, guess - 1) then
      m = guess - 1
    elseif guess == m then
      return guess, probes
    else
      probes = 2
      if not resident(key, packed, guess) then return guess, probes end
      lo = guess
    end
  end
  if lo == 0 then
    if m == 0 then return 0, probes end
    probes = probes + 1
    if not resident(key, packed, 0) then return 0, probes end
  end
  local step, hi = 1, 0
  while true do
    hi = lo + step
    if hi >= m then hi = m; break end
    probes = probes + 1
    if not resident(key, packed, hi) then break end
    lo = hi
    step = step * 2
  end
  while hi - lo > 1 do
    local mid = math.floor((lo + hi) / 2)
    probes = probes + 1
    if resident(key, packed, mid) then lo = mid else hi = mid end
  end
  return lo + 1, probes
end

local out = {}
for p = 1, tonumber(ARGV[1]) do
  local packed = ARGV[1 + p]
  local m = #packed / 8
  local probes, n, pr = 0, 0, 0
  for s = 1, #KEYS do
    n, pr = longest(KEYS[s], packed, m, n)
    out[#out + 1] = n
    probes = probes + pr
  end
  out[#out + 1] = probes
end
return out
