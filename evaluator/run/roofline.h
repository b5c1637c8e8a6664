// The physical floor of one call: the task's [floor] (HBM bytes, NVLink bytes
// and flops per rank) over the GPU's peak rates. A result reports how close a
// kernel came to it (% of roofline), and a time far below it is not believed:
// no kernel moves bytes faster than the memory or the links can.
#pragma once

#include "kforge/evaluator/hardware.h"
#include "kforge/evaluator/task.h"

namespace kforge::eval {

// Peak rates of one GPU, the highest a kernel could reach (so that the floor
// stays a lower bound): HBM from the probed memory clock and bus width, NVLink
// per direction over the active links, dense tensor-core flops for the dtype.
// A rate of 0 is unknown: that part of the floor is left out.
struct Peaks {
  double hbm_gbps = 0;
  double link_gbps = 0;
  double tflops = 0;
  // The least one synchronisation round between ranks costs: half the
  // probed flag round trip (one flag store made visible to a peer). 0: unknown.
  double sync_round_us = 0;
};

// From one GPU of the hardware card and the problem's dtype.
Peaks PeaksOf(const GpuInfo& gpu, Dtype dtype);
// The same, with the card's probed synchronisation latency.
Peaks PeaksOf(const HardwareCard& card, const GpuInfo& gpu, Dtype dtype);

struct Floor {
  double us = 0;           // 0: the task gives no floor, or no peak is known
  const char* bound = "";  // "hbm", "link", "flops" or "sync": what sets it
};

// The floor of one call of `p`. Emulated (ranks share one GPU): every rank's
// HBM traffic and flops go through the one device, and peer traffic is HBM
// traffic, so the floor is W times a rank's over the one GPU's rates. The
// latency term, sync_rounds times the round's cost, is never multiplied:
// ranks wait on each other at the same time.
Floor FloorOf(const Problem& p, const Peaks& peaks, bool emulated);

}  // namespace kforge::eval
