#include "kforge/evaluator/task_check.h"

#include <fmt/format.h>

#include <cmath>

#include "task/compare.h"
#include "task/inputs.h"

namespace kforge::eval {

Result<OracleCheckStats> CheckOracle(const Task& task, uint64_t seed, int64_t max_elements) {
  OracleCheckStats stats;
  for (int world : task.world_sizes) {
    for (Dtype dt : task.dtypes) {
      for (const SizeSpec& size : task.check_sizes) {
        KF_ASSIGN_OR_RETURN(Problem p, Instantiate(task, world, dt, size, true));
        int64_t elements = 0;
        for (const auto& t : p.inputs) elements += t.numel * world;
        for (const auto& t : p.outputs) elements += t.numel * world;
        if (max_elements > 0 && elements > max_elements) {
          ++stats.skipped;
          continue;
        }
        const std::string where = fmt::format("{} at W={}, {}, check size '{}'", task.key, world,
                                              DtypeName(dt), size.label);
        auto io = BuildOracleIo(p, seed, {});
        if (!io.ok()) return io.status().WithContext(where);
        if (Status s = RunOracle(p, *io); !s.ok()) return s.WithContext(where);
        for (int r = 0; r < world; ++r) {
          for (size_t k = 0; k < p.outputs.size(); ++k) {
            if (p.outputs[k].only_rank >= 0 && p.outputs[k].only_rank != r) continue;
            const auto& data = io->outputs[r][k].data;
            // A counted output: its count must be a row count, and only the
            // rows it counts need values (compare.h).
            size_t checked = data.size();
            if (const int c = p.outputs[k].count_output; c >= 0) {
              const auto& count = io->outputs[r][static_cast<size_t>(c)].data;
              auto rows = CountedRows(p.outputs[k], r, count.empty() ? -1.0 : count[0]);
              if (!rows.ok()) return rows.status().WithContext(where);
              checked = static_cast<size_t>(*rows * p.outputs[k].RowElems(r));
            }
            for (size_t i = 0; i < checked; ++i) {
              if (std::isfinite(data[i])) continue;
              return Error(
                  ErrorKind::kInvalidInput,
                  fmt::format(
                      "{}: oracle left rank {}'s output '{}' element {} = {} (not finite{})", where,
                      r, p.outputs[k].name, i, data[i],
                      std::isnan(data[i]) ? "; unwritten outputs stay NaN" : ""));
            }
            stats.output_values += static_cast<int64_t>(data.size());
          }
        }
        ++stats.problems;
      }
    }
  }
  return stats;
}

}  // namespace kforge::eval
