// serve_demo/report.h — what one shape's replay measured, and the table.
#ifndef TAILOR_EXAMPLES_SERVE_DEMO_REPORT_H_
#define TAILOR_EXAMPLES_SERVE_DEMO_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "moe_layer.h"
#include "tailor/stats.h"

namespace serve_demo {

struct ShapeReport {
  ModelShape shape;
  std::string device;  // "cpu", "cuda:0"
  int steps = 0;
  int64_t tokens = 0;
  double seconds = 0;  // inside Experts (and, on a GPU, its completion)
  int64_t tile_rows = 0;  // of the plans (the backend's choice)
  // Rows each way of cutting the per-expert work would execute, summed over
  // the steps. useful_rows is what the layer needs (T * k per step).
  int64_t useful_rows = 0;
  int64_t core_tail_rows = 0;  // tailor: full tiles + pow2 tail classes
  int64_t pow2_rows = 0;       // every expert padded to a power of two
  int64_t block16_rows = 0;    // moe_align_block_size, block 16
  int64_t block64_rows = 0;    // moe_align_block_size, block 64
  double max_rel_error = 0;
  int tokens_checked = 0;
  tailor::StatsSnapshot stats;  // this shape's share of the runtime's stats
};

tailor::StatsSnapshot Delta(const tailor::StatsSnapshot& after,
                            const tailor::StatsSnapshot& before);
void PrintProgress(const ShapeReport& report, int total_steps);
void PrintTable(const std::vector<ShapeReport>& reports,
                const tailor::StatsSnapshot& total,
                const std::string& cache_dir);

}  // namespace serve_demo

#endif  // TAILOR_EXAMPLES_SERVE_DEMO_REPORT_H_
