-- wrk script for `benches/limits.rs`: page-view beacons whose features are fresh in almost
-- every request (a page and a referrer never seen before, one of ten campaigns), the load that
-- grows the live unique-visitor sketches fastest: each beacon makes six new sketches.
local site = os.getenv("BENCH_SITE") or "bench-fresh"
local counter = 0
local prefix = ""

function init(args)
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
  prefix = tostring(math.random(1000000000))
end

request = function()
  counter = counter + 1
  local body = "site=" .. site
    .. "&guid=visitor-" .. math.random(1000000)
    .. "&timestamp=" .. os.time()
    .. "&page=%2Fp%2F" .. prefix .. "-" .. counter
    .. "&ref=r" .. prefix .. "-" .. counter .. ".example"
    .. "&campaign=c" .. (counter % 10)
  return wrk.format("POST", "/track", {["Content-Type"] = "application/x-www-form-urlencoded"}, body)
end
