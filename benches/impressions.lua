-- wrk script for `scripts/bench engine`: NDJSON batches of 500 fresh impressions (new
-- impression and user ids in every event, one campaign, 20 ads, timestamps of now), posted
-- with the bench's admin key: the flat-out ingest that fills the embedded engine's memtables.
-- BENCH_IMPRESSION_USERS=N draws each user from a pool of N instead, so that a user sees several
-- impressions, as people browsing do (fresh users are the event index's worst case).
-- Told to come back later (a 503 or a 429), a thread waits its `Retry-After` before it posts
-- again, as an ad server retrying would: re-sent at once, refused batches cost the load
-- generator's CPU on the cores the server and the node share.
local batch = tonumber(os.getenv("BENCH_BATCH") or "500")
local key = os.getenv("BENCH_KEY") or ""
-- Not BENCH_USERS: that is the conversions' pool, which `BENCH_LOADS` runs share.
local users = tonumber(os.getenv("BENCH_IMPRESSION_USERS") or "0") or 0
local advertiser = "6f1c1e1a-0000-4000-8000-00000000000a"
local campaign = "6f1c1e1a-0000-4000-8000-00000000000c"
local ads = {}

local function uuid()
  return string.format("%08x-%04x-4%03x-8%03x-%04x%08x",
    math.random(0, 0xffffffff), math.random(0, 0xffff), math.random(0, 0xfff),
    math.random(0, 0xfff), math.random(0, 0xffff), math.random(0, 0xffffffff))
end

local function user()
  if users > 0 then
    return string.format("6f1c1e1a-0000-4000-8000-%012x", math.random(1, users))
  end
  return uuid()
end

function init(args)
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
  for n = 1, 20 do ads[n] = uuid() end
end

request = function()
  local now = os.time() * 1000
  local lines = {}
  for n = 1, batch do
    lines[n] = '{"impression_id":"' .. uuid() .. '","advertiser_id":"' .. advertiser
      .. '","campaign_id":"' .. campaign .. '","ad_id":"' .. ads[(n % 20) + 1]
      .. '","user_id":"' .. user() .. '","timestamp":' .. now .. '}'
  end
  return wrk.format("POST", "/v1/impressions", {
    ["Content-Type"] = "application/x-ndjson",
    ["Authorization"] = "Bearer " .. key,
  }, table.concat(lines, "\n"))
end

local wait_ms = 0

response = function(status, headers)
  if status == 503 or status == 429 then
    local after = tonumber(headers["retry-after"] or headers["Retry-After"] or "1") or 1
    wait_ms = after * 1000
  else
    wait_ms = 0
  end
end

delay = function()
  return wait_ms
end
