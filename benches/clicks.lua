-- wrk script for `BENCH_LOAD=clicks scripts/bench-pair`: requests alternate between an NDJSON
-- batch of BENCH_BATCH (default 500) fresh impressions (new impression and user ids, one
-- campaign, 20 ads, timestamps of now) and a batch of valid clicks of those impressions a
-- second later, posted with the bench's admin key. Every valid click has its impression's
-- clicks read after its write (docs/DESIGN.md, "Marks") and its impression's user looked up
-- for the event index, so this is the load those cost most on.
-- Told to come back later (a 503 or a 429), a thread waits its `Retry-After`, as an ad server
-- retrying would.
local batch = tonumber(os.getenv("BENCH_BATCH") or "500")
local key = os.getenv("BENCH_KEY") or ""
local advertiser = "6f1c1e1a-0000-4000-8000-00000000000a"
local campaign = "6f1c1e1a-0000-4000-8000-00000000000c"
local ads = {}
-- The impressions of the last impressions batch, clicked by the next request.
local served = nil

local function uuid()
  return string.format("%08x-%04x-4%03x-8%03x-%04x%08x",
    math.random(0, 0xffffffff), math.random(0, 0xffff), math.random(0, 0xfff),
    math.random(0, 0xfff), math.random(0, 0xffff), math.random(0, 0xffffffff))
end

function init(args)
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
  for n = 1, 20 do ads[n] = uuid() end
end

request = function()
  local now = os.time() * 1000
  local lines = {}
  local path
  if served == nil then
    served = {}
    for n = 1, batch do
      served[n] = uuid()
      lines[n] = '{"impression_id":"' .. served[n] .. '","advertiser_id":"' .. advertiser
        .. '","campaign_id":"' .. campaign .. '","ad_id":"' .. ads[(n % 20) + 1]
        .. '","user_id":"' .. uuid() .. '","timestamp":' .. now .. '}'
    end
    path = "/v1/impressions"
  else
    for n = 1, batch do
      lines[n] = '{"impression_id":"' .. served[n] .. '","advertiser_id":"' .. advertiser
        .. '","campaign_id":"' .. campaign .. '","ad_id":"' .. ads[(n % 20) + 1]
        .. '","timestamp":' .. (now + 1000) .. '}'
    end
    served = nil
    path = "/v1/clicks"
  end
  return wrk.format("POST", path, {
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
