// Finding the kernel in a model's reply.
#pragma once

#include <string>
#include <string_view>

namespace kforge::agent {

struct Extraction {
  bool ok = false;
  std::string source;   // the kernel, when ok
  std::string problem;  // why there is none, written for the model, when !ok; what to send
                        // instead is the no_kernel feedback template's to say
  int blocks_seen = 0;  // fenced code blocks in the reply
};

// Takes the fenced code block (```cuda, ```cu, ```cpp, ```c++, ```c, or
// unlabelled) that defines kf_run. Several blocks defining kf_run are fine
// when they are identical; otherwise the reply is ambiguous and rejected.
// An unterminated last fence (a reply cut off mid-block) counts as no block.
Extraction ExtractKernel(std::string_view reply);

}  // namespace kforge::agent
