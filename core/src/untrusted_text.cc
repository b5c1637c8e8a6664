#include "kforge/core/untrusted_text.h"

#include <fmt/format.h>

#include <algorithm>

namespace kforge {
namespace {

constexpr unsigned char kEsc = 0x1b;

bool IsFinalByte(unsigned char c) { return c >= 0x40 && c <= 0x7e; }

// The index just past the escape sequence that starts at `i` (raw[i] is ESC
// or an 8-bit introducer). ECMA-48: CSI ends at a final byte; OSC, DCS, SOS,
// PM and APC at BEL or ST; other ESC forms are ESC plus intermediates plus
// one final byte. An unterminated sequence runs to the end.
size_t SkipEscape(std::string_view raw, size_t i, bool eight_bit, unsigned char intro) {
  size_t j = i + (eight_bit ? 2 : 1);
  if (!eight_bit) {
    if (j >= raw.size()) return j;
    intro = static_cast<unsigned char>(raw[j]);
    ++j;
    if (intro == '[') intro = 0x9b;
    if (intro == ']') intro = 0x9d;
    if (intro == 'P' || intro == 'X' || intro == '^' || intro == '_') intro = 0x90;
  }
  if (intro == 0x9b) {
    while (j < raw.size() && !IsFinalByte(static_cast<unsigned char>(raw[j]))) ++j;
    return std::min(raw.size(), j + 1);
  }
  if (intro == 0x9d || intro == 0x90 || intro == 0x98 || intro == 0x9e || intro == 0x9f) {
    for (; j < raw.size(); ++j) {
      if (raw[j] == '\a') return j + 1;
      if (static_cast<unsigned char>(raw[j]) == kEsc && j + 1 < raw.size() && raw[j + 1] == '\\')
        return j + 2;
    }
    return j;
  }
  if (eight_bit) return j;
  // ESC, intermediates (0x20-0x2f), then the final byte (already consumed
  // when it was not an intermediate).
  if (intro >= 0x20 && intro <= 0x2f) {
    while (j < raw.size() && static_cast<unsigned char>(raw[j]) >= 0x20 &&
           static_cast<unsigned char>(raw[j]) <= 0x2f)
      ++j;
    return std::min(raw.size(), j + 1);
  }
  return j;
}

}  // namespace

std::string PrintableText(std::string_view raw, bool keep_newlines) {
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size();) {
    const unsigned char c = static_cast<unsigned char>(raw[i]);
    if (c == kEsc) {
      i = SkipEscape(raw, i, false, 0);
      continue;
    }
    // C1 controls arrive as UTF-8 (U+0080..U+009F: C2 80..C2 9F).
    if (c == 0xc2 && i + 1 < raw.size()) {
      const unsigned char c1 = static_cast<unsigned char>(raw[i + 1]);
      if (c1 >= 0x80 && c1 <= 0x9f) {
        i = SkipEscape(raw, i, true, c1);
        continue;
      }
    }
    if (c == '\n') {
      out += keep_newlines ? '\n' : ' ';
    } else if (c == '\t') {
      out += '\t';
    } else if (c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

void BoundedCapture::Append(std::string_view bytes) {
  total_ += bytes.size();
  if (head_.size() < head_limit_) {
    const size_t take = std::min(bytes.size(), head_limit_ - head_.size());
    head_.append(bytes.substr(0, take));
    bytes.remove_prefix(take);
  }
  if (bytes.empty() || tail_limit_ == 0) return;
  if (bytes.size() >= tail_limit_) {
    tail_.assign(bytes.substr(bytes.size() - tail_limit_));
    return;
  }
  tail_.append(bytes);
  if (tail_.size() > tail_limit_) tail_.erase(0, tail_.size() - tail_limit_);
}

std::string BoundedCapture::Text() const {
  std::string text = PrintableText(head_, true);
  if (cut_bytes() > 0)
    text += fmt::format("\n[kforge: {} bytes cut of {}]\n", cut_bytes(), total_bytes());
  return text + PrintableText(tail_, true);
}

}  // namespace kforge
