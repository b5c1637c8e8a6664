// Text that untrusted code wrote (a candidate's stdout/stderr, a compiler's
// diagnostics of a candidate's source), made safe to store and show: no
// terminal escapes or control characters that could redraw kforge's own
// lines (a forged "status passed" after "\r\x1b[2K"), and bounded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kforge {

// `raw` without ANSI/VT escape sequences (CSI, OSC, DCS and two-byte ESC
// forms, 7- and 8-bit), carriage returns, DEL, other C0 controls and the C1
// range; tabs kept; newlines kept when `keep_newlines`, else each becomes a
// space (for a field shown on one line).
std::string PrintableText(std::string_view raw, bool keep_newlines);

// Keeps the first `head_bytes` and the last `tail_bytes` of everything
// appended, and counts the rest, so that a 160 MiB flood costs a bounded
// amount of memory. Not thread-safe.
class BoundedCapture {
 public:
  BoundedCapture(size_t head_bytes, size_t tail_bytes)
      : head_limit_(head_bytes), tail_limit_(tail_bytes) {}
  void Append(std::string_view bytes);
  uint64_t total_bytes() const { return total_; }
  // Bytes neither in the head nor the tail.
  uint64_t cut_bytes() const { return total_ - head_.size() - tail_.size(); }
  // The head and the tail, printable (PrintableText), with a line between
  // them saying how many bytes were cut when any were.
  std::string Text() const;

 private:
  size_t head_limit_, tail_limit_;
  uint64_t total_ = 0;
  std::string head_, tail_;
};

}  // namespace kforge
