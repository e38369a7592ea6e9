#include "trace.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace serve_demo {

int Trace::NextStepTokens() {
  std::poisson_distribution<int> arrivals(config_.arrivals_per_step);
  std::uniform_int_distribution<int> prompt(config_.min_prompt,
                                            config_.max_prompt);
  std::uniform_int_distribution<int> output(config_.min_output,
                                            config_.max_output);
  for (int i = arrivals(rng_); i > 0; --i)
    waiting_.push_back({prompt(rng_), output(rng_)});
  if (waiting_.empty() && running_.empty())
    waiting_.push_back({prompt(rng_), output(rng_)});

  // Decode: one token per running request.
  int tokens = 0;
  for (Request& r : running_) {
    if (tokens == config_.token_budget) break;
    --r.output_left;
    ++tokens;
  }
  std::erase_if(running_, [](const Request& r) { return r.output_left <= 0; });
  // Chunked prefill with what is left of the budget.
  while (tokens < config_.token_budget && !waiting_.empty() &&
         static_cast<int>(running_.size()) < config_.max_running) {
    Request& r = waiting_.front();
    int chunk = std::min(r.prompt_left, config_.token_budget - tokens);
    r.prompt_left -= chunk;
    tokens += chunk;
    if (r.prompt_left == 0) {
      running_.push_back(r);
      waiting_.pop_front();
    }
  }
  return std::max(tokens, 1);
}

Router::Router(int num_experts, int topk, uint64_t seed)
    : num_experts_(num_experts),
      topk_(topk),
      rng_(seed),
      bias_(num_experts),
      logits_(num_experts),
      order_(num_experts) {
  // Zipf-like popularity: expert e's bias ~ -log(rank).
  std::vector<int> rank(num_experts);
  std::iota(rank.begin(), rank.end(), 1);
  std::shuffle(rank.begin(), rank.end(), rng_);
  for (int e = 0; e < num_experts; ++e)
    bias_[e] = -1.2 * std::log(static_cast<double>(rank[e]));
}

void Router::Route(int tokens, std::vector<int32_t>& ids,
                   std::vector<float>& weights) {
  ids.resize(static_cast<size_t>(tokens) * topk_);
  weights.resize(ids.size());
  std::normal_distribution<double> noise(0.0, 1.0);
  for (int t = 0; t < tokens; ++t) {
    for (int e = 0; e < num_experts_; ++e) logits_[e] = bias_[e] + noise(rng_);
    std::iota(order_.begin(), order_.end(), 0);
    std::partial_sort(order_.begin(), order_.begin() + topk_, order_.end(),
                      [&](int a, int b) { return logits_[a] > logits_[b]; });
    double sum = 0;
    for (int j = 0; j < topk_; ++j)
      sum += std::exp(logits_[order_[j]] - logits_[order_[0]]);
    for (int j = 0; j < topk_; ++j) {
      ids[t * topk_ + j] = order_[j];
      weights[t * topk_ + j] = static_cast<float>(
          std::exp(logits_[order_[j]] - logits_[order_[0]]) / sum);
    }
  }
}

}  // namespace serve_demo
