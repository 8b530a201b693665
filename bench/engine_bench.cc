// Micro-benchmarks of the engine core and of the request-path JSON parsers.
//
//   build/bench/bmas_engine_bench
//
// BM_VirtualTime reports simulated output tokens per CPU-second ("tokens_per_cpu_s"): the
// closed-loop calibration scenario run in virtual time with the llama-3.1-8b-h100 profile.

#include <ctime>
#include <string>

#include <benchmark/benchmark.h>
#include <rapidjson/document.h>
#include <simdjson.h>

#include "engine/calibrate.h"
#include "engine/openai_api.h"
#include "engine/timing.h"

namespace bmas::engine {
namespace {

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

SchedulerConfig LlamaConfig() {
  const Profile& p = BuiltinProfiles().at("llama-3.1-8b-h100");
  SchedulerConfig c;
  c.max_num_seqs = p.max_num_seqs;
  c.max_num_batched_tokens = p.max_num_batched_tokens;
  c.block_size = p.block_size;
  c.num_kv_blocks = p.DerivedKvBlocks(p.block_size);
  c.max_model_len = p.max_model_len;
  return c;
}

// Closed loop: `concurrency` clients, 128-token prompts, 128 output tokens, 8 requests each.
void BM_VirtualTime(benchmark::State& state) {
  SchedulerConfig config = LlamaConfig();
  StepTimeModel time = BuiltinProfiles().at("llama-3.1-8b-h100").time;
  ClosedLoopOptions options;
  options.concurrency = static_cast<int>(state.range(0));
  options.requests_per_client = 8;
  uint64_t tokens = 0;
  double cpu = 0;
  for (auto _ : state) {
    double start = CpuSeconds();
    ClosedLoopResult r = RunClosedLoop(config, time, options);
    cpu += CpuSeconds() - start;
    tokens += r.output_tokens;
    benchmark::DoNotOptimize(r);
  }
  state.counters["tokens_per_cpu_s"] = tokens / cpu;
}
BENCHMARK(BM_VirtualTime)->Arg(1)->Arg(64)->Arg(256)->Arg(1000)->Unit(benchmark::kMillisecond);

// A typical chat request body (system prompt + user turn, streaming, stop strings).
std::string ChatBody() {
  std::string system(1500, 'x');
  for (size_t i = 5; i < system.size(); i += 6) system[i] = ' ';
  return R"({"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"system","content":")" +
         system +
         R"("},{"role":"user","content":"Explain continuous batching in two sentences."}],)"
         R"("max_tokens":128,"temperature":0.7,"stream":true,"stream_options":{"include_usage":true},)"
         R"("stop":["\n\n","END"],"seed":42})";
}

// Parse only: the fields the engine reads, with each library's DOM.
void BM_ParseSimdjson(benchmark::State& state) {
  std::string body = ChatBody();
  simdjson::dom::parser parser;
  for (auto _ : state) {
    simdjson::dom::element doc;
    if (parser.parse(body).get(doc)) state.SkipWithError("parse");
    std::string_view model;
    int64_t max_tokens = 0;
    simdjson::dom::array messages;
    if (doc["model"].get_string().get(model) || doc["max_tokens"].get_int64().get(max_tokens) ||
        doc["messages"].get_array().get(messages)) {
      state.SkipWithError("fields");
    }
    size_t bytes = 0;
    for (simdjson::dom::element m : messages) {
      std::string_view content;
      if (m["content"].get_string().get(content)) state.SkipWithError("content");
      bytes += content.size();
    }
    benchmark::DoNotOptimize(bytes + max_tokens + model.size());
  }
  state.SetBytesProcessed(state.iterations() * body.size());
}
BENCHMARK(BM_ParseSimdjson);

void BM_ParseRapidjson(benchmark::State& state) {
  std::string body = ChatBody();
  for (auto _ : state) {
    rapidjson::Document doc;
    doc.Parse(body.data(), body.size());
    if (doc.HasParseError()) state.SkipWithError("parse");
    std::string_view model(doc["model"].GetString(), doc["model"].GetStringLength());
    int64_t max_tokens = doc["max_tokens"].GetInt64();
    size_t bytes = 0;
    for (const auto& m : doc["messages"].GetArray()) bytes += m["content"].GetStringLength();
    benchmark::DoNotOptimize(bytes + max_tokens + model.size());
  }
  state.SetBytesProcessed(state.iterations() * body.size());
}
BENCHMARK(BM_ParseRapidjson);

// The whole request parse bmas engine does: JSON, validation, chat template, tokenization.
void BM_RequestParser(benchmark::State& state) {
  std::string body = ChatBody();
  RequestParser parser;
  for (auto _ : state) {
    auto r = parser.Parse(body, Endpoint::kChatCompletions);
    if (!r) state.SkipWithError("parse");
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(state.iterations() * body.size());
}
BENCHMARK(BM_RequestParser);

}  // namespace
}  // namespace bmas::engine

BENCHMARK_MAIN();
