-- wrk script for `benches/tags.rs`: impression pixels (`GET /i`) as browsers fire them, each a
-- different signed URL from the file BENCH_PIXELS names (one query string per line, signed by
-- the benchmark with a tag secret it created), taken in turn from line BENCH_START + 1, so a
-- round continues where the last one stopped.
local queries = {}
local next_query = 0

function init(args)
  for line in io.lines(os.getenv("BENCH_PIXELS")) do
    queries[#queries + 1] = line
  end
  next_query = tonumber(os.getenv("BENCH_START") or "0") % #queries
end

request = function()
  next_query = next_query % #queries + 1
  return wrk.format("GET", "/i?" .. queries[next_query], {
    ["User-Agent"] = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
  })
end
