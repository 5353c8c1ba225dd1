-- wrk script for `benches/tags.rs`: view reports (`POST /v`) as `/v.js` sends them with
-- `sendBeacon` (a form as `text/plain`, a browser `User-Agent`), signed with the pixel queries
-- of the file BENCH_PIXELS names. Report j is line j/2's `measurable`, then its `viewable`: two
-- distinct reports per impression, so each is stored (none answered from memory as repeated).
-- BENCH_START is the first report's j, so a round continues where the last one stopped.
local queries = {}
local next_report = 0
local bodies = {
  "e=measurable&in_view_ms=0",
  "e=viewable&in_view_ms=1400&max_visible=90",
}

function init(args)
  for line in io.lines(os.getenv("BENCH_PIXELS")) do
    queries[#queries + 1] = line
  end
  next_report = tonumber(os.getenv("BENCH_START") or "0")
end

request = function()
  local line = math.floor(next_report / 2) % #queries + 1
  local body = bodies[next_report % 2 + 1]
  next_report = next_report + 1
  return wrk.format("POST", "/v?" .. queries[line], {
    ["Content-Type"] = "text/plain;charset=UTF-8",
    ["User-Agent"] = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
  }, body)
end
