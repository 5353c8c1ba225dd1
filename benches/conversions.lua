-- wrk script for `scripts/bench-pair` (BENCH_LOADS): NDJSON batches of BENCH_BATCH (500) fresh
-- conversions of the advertiser of benches/impressions.lua, posted with the bench's admin key:
-- each a new `conversion_id`, `action` "purchase", a timestamp of now, `value` "12.50" EUR and
-- a `user_id` drawn from a pool of BENCH_USERS (100000) users, so that they find the events
-- the `events` part posted. BENCH_PART=events posts instead those users' events: batches of
-- BENCH_BATCH impressions (one campaign, 20 ads), each followed by a batch of clicks on one in
-- BENCH_CLICK_EVERY (10) of them, so the deciding reads real index entries (post-click and
-- post-view). `BENCH_LOAD=clicks scripts/bench-pair` posts those events alone, every
-- impression clicked.
local batch = tonumber(os.getenv("BENCH_BATCH") or "500")
local users = tonumber(os.getenv("BENCH_USERS") or "100000")
local part = os.getenv("BENCH_PART") or "conversions"
local click_every = tonumber(os.getenv("BENCH_CLICK_EVERY") or "10")
local key = os.getenv("BENCH_KEY") or ""
local advertiser = "6f1c1e1a-0000-4000-8000-00000000000a"
local campaign = "6f1c1e1a-0000-4000-8000-00000000000c"
local ads = {}
local prefix
local sent = 0
-- The impressions of the last `events` batch, clicked one in BENCH_CLICK_EVERY by the next
-- request.
local shown = nil

local function uuid()
  return string.format("%08x-%04x-4%03x-8%03x-%04x%08x",
    math.random(0, 0xffffffff), math.random(0, 0xffff), math.random(0, 0xfff),
    math.random(0, 0xfff), math.random(0, 0xffff), math.random(0, 0xffffffff))
end

-- User n of the pool: the same ids in every wrk run.
local function user()
  return string.format("6f1c1e1a-0000-4000-8000-%012x", math.random(1, users))
end

function init(args)
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
  for n = 1, 20 do ads[n] = string.format("6f1c1e1a-0000-4000-8000-%012x", 0xad0000 + n) end
  prefix = string.format("bench-%08x%08x-", math.random(0, 0xffffffff), math.random(0, 0xffffffff))
end

local function headers()
  return {
    ["Content-Type"] = "application/x-ndjson",
    ["Authorization"] = "Bearer " .. key,
  }
end

local function conversions()
  local now = os.time() * 1000
  local lines = {}
  for n = 1, batch do
    sent = sent + 1
    lines[n] = '{"conversion_id":"' .. prefix .. sent .. '","advertiser_id":"' .. advertiser
      .. '","action":"purchase","timestamp":' .. now .. ',"user_id":"' .. user()
      .. '","value":"12.50","currency":"EUR"}'
  end
  return wrk.format("POST", "/v1/conversions", headers(), table.concat(lines, "\n"))
end

local function events()
  local now = os.time() * 1000
  local lines = {}
  if shown then
    for n = 1, #shown, click_every do
      local i = shown[n]
      lines[#lines + 1] = '{"impression_id":"' .. i[1] .. '","advertiser_id":"' .. advertiser
        .. '","campaign_id":"' .. campaign .. '","ad_id":"' .. i[2] .. '","timestamp":' .. now .. '}'
    end
    shown = nil
    return wrk.format("POST", "/v1/clicks", headers(), table.concat(lines, "\n"))
  end
  shown = {}
  for n = 1, batch do
    local id, ad = uuid(), ads[(n % 20) + 1]
    shown[n] = { id, ad }
    lines[n] = '{"impression_id":"' .. id .. '","advertiser_id":"' .. advertiser
      .. '","campaign_id":"' .. campaign .. '","ad_id":"' .. ad
      .. '","user_id":"' .. user() .. '","timestamp":' .. (now - 1000) .. '}'
  end
  return wrk.format("POST", "/v1/impressions", headers(), table.concat(lines, "\n"))
end

request = function()
  if part == "events" then return events() end
  return conversions()
end
