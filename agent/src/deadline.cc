// --deadline and a run file's `deadline`: a scanner of the few forms
// ParseDeadline accepts (run_config.h), with no trailing text let through.
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <ctime>
#include <string_view>

#include "kforge/agent/run_config.h"
#include "kforge/core/scan.h"

namespace kforge::agent {
namespace {

constexpr const char* kForms =
    "use YYYY-MM-DDTHH:MM[:SS] (local time), the same with Z or +HH:MM, +Nh/+Nm/+Ns, or unix "
    "seconds";

Status Bad(std::string_view text, std::string_view why) {
  return Error(ErrorKind::kInvalidInput, fmt::format("deadline '{}': {}; {}", text, why, kForms));
}

// Reads exactly `width` digits at `at`.
bool Digits(std::string_view s, size_t at, size_t width, int* out) {
  if (s.size() < at + width) return false;
  int v = 0;
  for (size_t i = at; i < at + width; ++i) {
    if (!scan::IsDigit(s[i])) return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant, "chrono-
// compatible low-level date algorithms", days_from_civil).
int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int DaysInMonth(int y, int m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

// A finite, non-negative decimal filling all of `s`.
bool Number(std::string_view s, double* out) {
  if (s.empty() || !(scan::IsDigit(s[0]) || s[0] == '.')) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && std::isfinite(*out);
}

Result<double> ParseDate(std::string_view text) {
  int y, mo, d, h, mi, sec = 0;
  if (!Digits(text, 0, 4, &y) || text.size() < 16 || text[4] != '-' || !Digits(text, 5, 2, &mo) ||
      text[7] != '-' || !Digits(text, 8, 2, &d) || (text[10] != 'T' && text[10] != ' ') ||
      !Digits(text, 11, 2, &h) || text[13] != ':' || !Digits(text, 14, 2, &mi)) {
    return Bad(text, "not a date and time");
  }
  size_t at = 16;
  if (at < text.size() && text[at] == ':') {
    if (!Digits(text, at + 1, 2, &sec)) return Bad(text, "seconds need two digits");
    at += 3;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > DaysInMonth(y, mo) || h > 23 || mi > 59 || sec > 59)
    return Bad(text, "no such date or time");
  const std::string_view zone = text.substr(at);
  if (zone.empty()) {
    // No zone: the machine's local time, daylight saving decided by mktime.
    std::tm tm{};
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    tm.tm_isdst = -1;
    return static_cast<double>(std::mktime(&tm));
  }
  int offset_s = 0;
  if (zone == "Z" || zone == "z") {
    offset_s = 0;
  } else if (zone[0] == '+' || zone[0] == '-') {
    int oh = 0, om = 0;
    const bool colon = zone.size() == 6 && zone[3] == ':';
    const bool ok =
        Digits(zone, 1, 2, &oh) && (zone.size() == 3 || (colon && Digits(zone, 4, 2, &om)) ||
                                    (zone.size() == 5 && Digits(zone, 3, 2, &om)));
    if (!ok || oh > 23 || om > 59)
      return Bad(text, fmt::format("'{}' is not a zone (Z, +HH:MM, -HHMM or +HH)", zone));
    offset_s = (zone[0] == '-' ? -1 : 1) * (oh * 3600 + om * 60);
  } else {
    return Bad(text, fmt::format("unexpected '{}' after the time", zone));
  }
  const int64_t days = DaysFromCivil(y, mo, d);
  return static_cast<double>(days * 86400 + h * 3600 + mi * 60 + sec - offset_s);
}

}  // namespace

Result<double> ParseDeadline(const std::string& text, double now_unix) {
  const std::string_view t(text);
  if (t.empty()) return Bad(t, "empty");
  if (t[0] == '+') {
    const char unit = t.back();
    const double scale = unit == 'h' ? 3600 : unit == 'm' ? 60 : unit == 's' ? 1 : 0;
    if (scale == 0) return Bad(t, "a relative deadline ends in h, m or s");
    double n = 0;
    if (!Number(t.substr(1, t.size() - 2), &n))
      return Bad(t, fmt::format("'{}' is not a number", t.substr(1, t.size() - 2)));
    return now_unix + n * scale;
  }
  if (t.size() >= 5 && t[4] == '-') return ParseDate(t);
  double v = 0;
  if (Number(t, &v)) return v;
  return Bad(t, "not understood");
}

}  // namespace kforge::agent
