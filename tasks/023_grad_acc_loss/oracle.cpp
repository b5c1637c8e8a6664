// Token-normalised loss for gradient accumulation: forward (all-reduced
// loss * valid tokens, divided by the window's valid tokens) and backward.
#include "kforge/oracle.h"

#include <cmath>
#include <cstdint>
#include <limits>

namespace {

constexpr int64_t kMaxLocalTokens = 8192;

// Values every rank's generator must agree on derive from the trial seed alone.
uint64_t Mix(uint64_t seed, uint64_t salt) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (salt + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Rank r's valid tokens: 1..8192, except that in half of the trials one rank
// (chosen by the seed) has an empty micro-batch.
int64_t LocalTokens(uint64_t seed, int world, int rank) {
  const uint64_t empty = Mix(seed, 1000) % (2 * static_cast<uint64_t>(world));
  if (static_cast<uint64_t>(rank) == empty) return 0;
  kforge::OracleRng rng(Mix(seed, static_cast<uint64_t>(rank)));
  return rng.Int(1, kMaxLocalTokens);
}

// The window's valid tokens: this micro-batch on every rank plus up to three
// more micro-batches per rank (gradient accumulation).
int64_t GlobalTokens(uint64_t seed, int world) {
  int64_t sum = 0;
  for (int r = 0; r < world; ++r) sum += LocalTokens(seed, world, r);
  kforge::OracleRng rng(Mix(seed, 2000));
  return sum + rng.Int(0, 3 * kMaxLocalTokens * world);
}

}  // namespace

KF_INPUT_GENERATOR(grad_acc_loss) {
  const uint64_t seed = gen.trial_seed;
  auto& v = gen.tensor->data;
  if (v.size() != 1) return kforge::Error(kforge::ErrorKind::kHarness, "grad_acc_loss: not [1]");
  const int64_t local = LocalTokens(seed, gen.world, gen.rank);
  if (gen.input_name == "loss") {
    // The mean over an empty micro-batch is 0/0.
    v[0] = local == 0 ? std::numeric_limits<double>::quiet_NaN() : 0.5 + 3.5 * gen.rng->Uniform();
  } else if (gen.input_name == "local_valid_tokens") {
    v[0] = static_cast<double>(local);
  } else if (gen.input_name == "global_valid_tokens") {
    v[0] = static_cast<double>(GlobalTokens(seed, gen.world));
  } else if (gen.input_name == "grad_normalized_loss") {
    kforge::OracleRng rng(Mix(seed, 3000));
    v[0] = 0.5 + 1.5 * rng.Uniform();
  } else if (gen.input_name == "grad_loss_sum") {
    kforge::OracleRng rng(Mix(seed, 4000));
    v[0] = (0.25 + rng.Uniform()) * 1e-4;
  } else {
    return kforge::Error(kforge::ErrorKind::kHarness, "grad_acc_loss: unknown input");
  }
  return kforge::Status::Ok();
}

KF_ORACLE(grad_acc_loss) {
  double loss_sum = 0;
  for (int r = 0; r < io.world; ++r) {
    const double n = io.in(r, "local_valid_tokens")[0];
    const double loss = io.in(r, "loss")[0];
    // PKB: nan_to_num(loss) when the micro-batch is empty, so its term is 0.
    if (n != 0) loss_sum += loss * n;
  }
  for (int r = 0; r < io.world; ++r) {
    const double n = io.in(r, "local_valid_tokens")[0];
    const double g = io.in(r, "global_valid_tokens")[0];
    if (!(g > 0)) return kforge::Error(kforge::ErrorKind::kHarness, "grad_acc_loss: G <= 0");
    io.out(r, "loss_sum")[0] = loss_sum;
    io.out(r, "normalized_loss")[0] = loss_sum / g;
    io.out(r, "grad_loss")[0] =
        io.in(r, "grad_normalized_loss")[0] * n / g + io.in(r, "grad_loss_sum")[0] * n;
  }
  return kforge::Status::Ok();
}
