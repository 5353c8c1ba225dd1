-- wrk script for `benches/track.rs`: one page-view beacon per request, form-posted like a
-- script tag posts it, from 100,000 visitors, with four features of realistic cardinality
-- (5 referrers, 40 pages, 3 devices, 10 countries) and a timestamp of now.
local referrers = {"facebook.com", "google.com", "twitter.com", "news.ycombinator.com", "direct"}
local devices = {"desktop", "mobile", "tablet"}
local countries = {"US", "DE", "FR", "GB", "IN", "BR", "JP", "CA", "ES", "IT"}
local site = os.getenv("BENCH_SITE") or "bench-track"

function init(args)
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
end

request = function()
  local body = "site=" .. site
    .. "&guid=visitor-" .. math.random(100000)
    .. "&timestamp=" .. os.time()
    .. "&referrer=" .. referrers[math.random(#referrers)]
    .. "&page=%2Fpage-" .. math.random(40)
    .. "&device=" .. devices[math.random(#devices)]
    .. "&country=" .. countries[math.random(#countries)]
  return wrk.format("POST", "/track", {["Content-Type"] = "application/x-www-form-urlencoded"}, body)
end
