// serve_demo/trace.h — a synthetic continuous-batching trace with MoE routing.
//
// Requests arrive with random prompt and output lengths. Each step the
// scheduler fills a token budget: one decode token per running request, then
// chunked prefill of waiting prompts. Every token of the step is routed to
// top-k of E experts by a router with a skewed expert popularity (some
// experts are hot, many are cold), so per-expert counts are ragged: empty
// experts, one-token experts and crowded ones in the same step.
#ifndef TAILOR_EXAMPLES_SERVE_DEMO_TRACE_H_
#define TAILOR_EXAMPLES_SERVE_DEMO_TRACE_H_

#include <cstdint>
#include <deque>
#include <random>
#include <vector>

namespace serve_demo {

struct TraceConfig {
  int token_budget = 256;  // tokens per step at most
  int max_running = 48;    // concurrent decoding requests
  int min_prompt = 8, max_prompt = 300;
  int min_output = 4, max_output = 96;
  double arrivals_per_step = 1.5;
};

class Trace {
 public:
  Trace(TraceConfig config, uint64_t seed) : config_(config), rng_(seed) {}

  // Number of tokens in the next step (>= 1).
  int NextStepTokens();

 private:
  struct Request {
    int prompt_left;
    int output_left;
  };
  TraceConfig config_;
  std::mt19937_64 rng_;
  std::deque<Request> waiting_;
  std::vector<Request> running_;
};

// Routes tokens to experts like a softmax top-k router with renormalized
// weights (Mixtral/Qwen3 style), with a fixed per-expert popularity bias.
class Router {
 public:
  Router(int num_experts, int topk, uint64_t seed);
  // ids [tokens, k] i32 and weights [tokens, k] f32, resized to fit.
  void Route(int tokens, std::vector<int32_t>& ids,
             std::vector<float>& weights);

 private:
  int num_experts_;
  int topk_;
  std::mt19937_64 rng_;
  std::vector<double> bias_;
  std::vector<double> logits_;
  std::vector<int> order_;
};

}  // namespace serve_demo

#endif  // TAILOR_EXAMPLES_SERVE_DEMO_TRACE_H_
