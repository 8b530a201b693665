-- wrk script for bench/gateway_bench.py: POSTs one small non-streaming completion
-- (max_tokens 16) with the key in BMAS_BENCH_KEY, and prints one JSON line of results.
-- Usage: BMAS_BENCH_KEY=KEY wrk -t1 -c32 -d10s -s bench/wrk_completion.lua URL/v1/completions
wrk.method = "POST"
wrk.body = '{"model":"meta-llama/Llama-3.1-8B-Instruct",' ..
           '"prompt":"Say hello to the cluster and its users","max_tokens":16}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("BMAS_BENCH_KEY") or "none")
-- BMAS_BENCH_CLIENT=openai: the head the `openai` npm client (4.104.0, on Node 20) sends, as
-- captured from it: sixteen fields where wrk alone sends four.
if os.getenv("BMAS_BENCH_CLIENT") == "openai" then
  for name, value in pairs({
    ["Accept"] = "application/json", ["User-Agent"] = "OpenAI/JS 4.104.0",
    ["X-Stainless-Lang"] = "js", ["X-Stainless-Package-Version"] = "4.104.0",
    ["X-Stainless-OS"] = "Linux", ["X-Stainless-Arch"] = "x64", ["X-Stainless-Runtime"] = "node",
    ["X-Stainless-Runtime-Version"] = "v20.20.2", ["X-Stainless-Retry-Count"] = "0",
    ["X-Stainless-Timeout"] = "600", ["Accept-Encoding"] = "gzip,deflate",
    ["Connection"] = "keep-alive"}) do
    wrk.headers[name] = value
  end
end

-- Latencies are in microseconds.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"socket_errors":%d,"status_errors":%d,' ..
    '"p50_us":%d,"p99_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99), latency.mean))
end
