// Row-sharded embedding lookup: every id's row from the rank that owns it, in
// the order of the ids.
#include "kforge/oracle.h"

KF_ORACLE(embedding_lookup) {
  const int w = io.world;
  const double rows = io.param("rows");
  const size_t hidden = static_cast<size_t>(io.param("D"));
  for (int r = 0; r < w; ++r) {
    auto ids = io.in(r, "indices");
    auto out = io.out(r, "out");
    for (size_t k = 0; k < ids.size(); ++k) {
      if (!(ids[k] >= 0 && ids[k] < w * rows))
        return kforge::Error(kforge::ErrorKind::kHarness, "an id outside the table");
      const int owner = static_cast<int>(ids[k] / rows);
      const size_t row = static_cast<size_t>(ids[k] - owner * rows);
      auto shard = io.in(owner, "local_shard");
      for (size_t j = 0; j < hidden; ++j) out[k * hidden + j] = shard[row * hidden + j];
    }
  }
  return kforge::Status::Ok();
}
