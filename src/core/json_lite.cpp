#include "json_lite.h"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace precprobe::json {
namespace {

constexpr char kHex[] = "0123456789abcdef";

bool needs_escape(unsigned char c) noexcept { return c < 0x20 || c == '"' || c == '\\'; }

bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

// ---- writing ----

void TextOut::grow(size_t n) {
  size_t used = static_cast<size_t>(p_ - s_.data());
  // Only the size grows by what is needed (resize zero-fills); the capacity grows
  // geometrically inside std::string.
  s_.resize(used + n + 1024);
  p_ = s_.data() + used;
  end_ = s_.data() + s_.size();
}

void TextOut::int64(int64_t v) { p_ = fmt::format_to(p_, FMT_COMPILE("{}"), v); }

void TextOut::number(double v) {
  if (!std::isfinite(v)) {
    lit("null");  // format_version 2: JSON has no NaN/Inf; the caller names them if needed
  } else {
    p_ = fmt::format_to(p_, FMT_COMPILE("{}"), v);
  }
}

void TextOut::float32(double v) {
  auto f = static_cast<float>(v);
  if (!std::isfinite(f)) {
    number(v);  // NaN/Inf (null), or a double beyond the float range: keep it whole
  } else {
    p_ = fmt::format_to(p_, FMT_COMPILE("{}"), f);
  }
}

void TextOut::hex64(uint64_t v) {
  p_[0] = '"';
  for (int i = 0; i < 16; ++i) p_[16 - i] = kHex[(v >> (4 * i)) & 15];
  p_[17] = '"';
  p_ += 18;
}

void TextOut::string(std::string_view s) {
  *p_++ = '"';
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (!needs_escape(c)) {
      *p_++ = ch;
      continue;
    }
    *p_++ = '\\';
    switch (c) {
      case '"':
        *p_++ = '"';
        break;
      case '\\':
        *p_++ = '\\';
        break;
      case '\n':
        *p_++ = 'n';
        break;
      case '\t':
        *p_++ = 't';
        break;
      case '\r':
        *p_++ = 'r';
        break;
      default:
        std::memcpy(p_, "u00", 3);
        p_[3] = kHex[c >> 4];
        p_[4] = kHex[c & 15];
        p_ += 5;
    }
  }
  *p_++ = '"';
}

bool is_valid_value(std::string_view text) {
  Cursor c(text);
  return c.skip_value() && c.at_end();
}

// ---- reading ----

bool Cursor::fail(const char* what) noexcept {
  if (error_ == nullptr) {
    error_ = what;
    error_pos_ = static_cast<size_t>(p_ - begin_);
  }
  return false;
}

std::string Cursor::error_message() const {
  if (error_ == nullptr) return {};
  return fmt::format("{} at byte {}", error_, error_pos_);
}

bool Cursor::expect_failed(char c) noexcept {
  switch (c) {
    case '{':
      return fail("expected '{'");
    case '}':
      return fail("expected ',' or '}'");
    case '[':
      return fail("expected '['");
    case ']':
      return fail("expected ',' or ']'");
    case ':':
      return fail("expected ':'");
    default:
      return fail("unexpected character");
  }
}

bool Cursor::key_slow(std::string_view& k) {
  skip_ws();
  if (p_ >= end_ || *p_ != '"') return fail("expected a key");
  const char* start = p_ + 1;
  const char* q = start;
  while (q < end_ && !needs_escape(static_cast<unsigned char>(*q))) ++q;
  if (q < end_ && *q == '"') {
    k = std::string_view(start, static_cast<size_t>(q - start));
    p_ = q + 1;
  } else {
    if (!string_slow(key_scratch_)) return false;
    k = key_scratch_;
  }
  return expect(':');
}

// Strings with escapes or after blanks.
bool Cursor::string_slow(std::string& out) {
  skip_ws();
  if (p_ >= end_ || *p_ != '"') return fail("expected a string");
  out.clear();
  ++p_;
  while (p_ < end_) {
    auto c = static_cast<unsigned char>(*p_++);
    if (c == '"') return true;
    if (c < 0x20) return fail("control character in string");
    if (c != '\\') {
      out.push_back(static_cast<char>(c));
      continue;
    }
    if (p_ >= end_) break;
    char e = *p_++;
    switch (e) {
      case '"':
        out.push_back('"');
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '/':
        out.push_back('/');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'u': {
        auto read4 = [this](uint32_t& cp) {
          if (end_ - p_ < 4) return false;
          cp = 0;
          for (int i = 0; i < 4; ++i) {
            int h = hex_value(p_[i]);
            if (h < 0) return false;
            cp = cp * 16 + static_cast<uint32_t>(h);
          }
          p_ += 4;
          return true;
        };
        uint32_t cp = 0;
        if (!read4(cp)) return fail("bad \\u escape");
        if (cp >= 0xD800 && cp < 0xDC00 && end_ - p_ >= 6 && p_[0] == '\\' && p_[1] == 'u') {
          const char* save = p_;
          p_ += 2;
          uint32_t lo = 0;
          if (read4(lo) && lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else {
            p_ = save;
          }
        }
        if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;  // lone surrogate
        append_utf8(out, cp);
        break;
      }
      default:
        return fail("bad escape in string");
    }
  }
  return fail("unterminated string");
}

bool Cursor::int64_slow(int64_t& v) noexcept {
  skip_ws();
  const char* q = p_;
  bool neg = q < end_ && *q == '-';
  if (neg) ++q;
  if (q >= end_ || !is_digit(*q)) return fail("expected an integer");
  if (*q == '0' && q + 1 < end_ && is_digit(q[1])) return fail("leading zero in number");
  uint64_t u = 0;
  const uint64_t limit = neg ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
  for (; q < end_ && is_digit(*q); ++q) {
    auto d = static_cast<uint64_t>(*q - '0');
    if (u > (limit - d) / 10) return fail("integer out of range");
    u = u * 10 + d;
  }
  if (q < end_ && (*q == '.' || *q == 'e' || *q == 'E')) return fail("expected an integer");
  v = neg ? static_cast<int64_t>(0 - u) : static_cast<int64_t>(u);
  p_ = q;
  return true;
}

// Validates the JSON number grammar (from_chars alone would accept "inf", "1." and more).
bool Cursor::number_token(std::string_view& tok) noexcept {
  skip_ws();
  const char* q = p_;
  if (q < end_ && *q == '-') ++q;
  if (q < end_ && *q == '0') {
    ++q;
  } else if (q < end_ && is_digit(*q)) {
    while (q < end_ && is_digit(*q)) ++q;
  } else {
    return fail("expected a number");
  }
  if (q < end_ && *q == '.') {
    ++q;
    if (q >= end_ || !is_digit(*q)) return fail("bad number");
    while (q < end_ && is_digit(*q)) ++q;
  }
  if (q < end_ && (*q == 'e' || *q == 'E')) {
    ++q;
    if (q < end_ && (*q == '+' || *q == '-')) ++q;
    if (q >= end_ || !is_digit(*q)) return fail("bad number");
    while (q < end_ && is_digit(*q)) ++q;
  }
  tok = std::string_view(p_, static_cast<size_t>(q - p_));
  p_ = q;
  return true;
}

bool Cursor::nonfinite_name(double& v) noexcept {
  skip_ws();
  if (p_ < end_ && *p_ == '"') return number_slow(v);
  return fail("expected \"nan\", \"inf\" or \"-inf\"");
}

bool Cursor::number_slow(double& v) noexcept {
  skip_ws();
  if (end_ - p_ >= 4 && std::memcmp(p_, "null", 4) == 0) {
    // format_version 2: a non-finite value is null (NaN unless a "<key>_nonfinite" field
    // names it).
    v = std::numeric_limits<double>::quiet_NaN();
    p_ += 4;
    return true;
  }
  if (p_ < end_ && *p_ == '"') {
    // format_version 1 wrote non-finite values as strings (JSON has no NaN); compare
    // without allocating.
    const char* q = p_ + 1;
    const char* close =
        static_cast<const char*>(std::memchr(q, '"', std::min<size_t>(6, end_ - q)));
    if (close != nullptr) {
      std::string_view s(q, static_cast<size_t>(close - q));
      if (s == "nan" || s == "-nan") {
        v = std::numeric_limits<double>::quiet_NaN();
      } else if (s == "inf" || s == "+inf") {
        v = std::numeric_limits<double>::infinity();
      } else if (s == "-inf") {
        v = -std::numeric_limits<double>::infinity();
      } else {
        return fail("expected a number or \"nan\", \"inf\", \"-inf\"");
      }
      p_ = close + 1;
      return true;
    }
    return fail("expected a number or \"nan\", \"inf\", \"-inf\"");
  }
  std::string_view tok;
  if (!number_token(tok)) return false;
  auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
  if (r.ec == std::errc()) return true;
  // Out of range: underflow means a value too close to zero for a double (keep strtod's
  // rounding); overflow has no honest value and fails.
  if (tok.size() > 800) return fail("number out of range");
  char buf[801];
  std::memcpy(buf, tok.data(), tok.size());
  buf[tok.size()] = '\0';
  double d = std::strtod(buf, nullptr);
  if (std::isinf(d)) return fail("number out of range");
  v = d;
  return true;
}

namespace detail {

bool divide_pow10(uint64_t m, int frac, double& v) noexcept {
#if defined(__SIZEOF_INT128__)
  // q = floor(m * 2^s / d) with 54 or 55 bits (m has bm bits, d has bd bits), the
  // remainder says whether anything below q's last bit is non-zero.
  const uint64_t d = kPow10Int[frac];
  const int bm = 64 - __builtin_clzll(m);
  const int bd = 64 - __builtin_clzll(d);
  const int s = 54 + bd - bm;
  if (m <= (uint64_t{1} << 53) || s < 0 || s > 64) return false;
  const unsigned __int128 n = static_cast<unsigned __int128>(m) << s;
  const auto q = static_cast<uint64_t>(n / d);
  const bool sticky = n != static_cast<unsigned __int128>(q) * d;
  // Keep 53 bits; round the 1 or 2 bits below to nearest, ties to even.
  const int extra = (64 - __builtin_clzll(q)) - 53;
  uint64_t mant = q >> extra;
  const uint64_t low = q & ((uint64_t{1} << extra) - 1);
  const uint64_t half = uint64_t{1} << (extra - 1);
  if (low > half || (low == half && (sticky || (mant & 1) != 0))) ++mant;
  // mant <= 2^53 is exact, and so is scaling it by 2^(extra - s), in [2^-63, 2^2].
  const uint64_t bits = static_cast<uint64_t>(1023 + extra - s) << 52;
  double scale;
  std::memcpy(&scale, &bits, 8);
  v = static_cast<double>(mant) * scale;
  return true;
#else
  (void)m;
  (void)frac;
  (void)v;
  return false;
#endif
}

}  // namespace detail

bool Cursor::plain_number(const char* end, double& v) noexcept {
  // The grammar was checked by number(); 19 digits without exponent cannot overflow.
  auto r = std::from_chars(p_, end, v);
  if (r.ec != std::errc() || r.ptr != end) return number_slow(v);
  p_ = end;
  return true;
}

bool Cursor::boolean(bool& v) noexcept {
  skip_ws();
  if (end_ - p_ >= 4 && std::memcmp(p_, "true", 4) == 0) {
    v = true;
    p_ += 4;
    return true;
  }
  if (end_ - p_ >= 5 && std::memcmp(p_, "false", 5) == 0) {
    v = false;
    p_ += 5;
    return true;
  }
  return fail("expected true or false");
}

bool Cursor::hex64(uint64_t& v) noexcept {
  skip_ws();
  if (p_ >= end_ || *p_ != '"') return fail("expected a hex string");
  const char* q = p_ + 1;
  uint64_t u = 0;
  int n = 0;
  for (; q < end_ && *q != '"'; ++q, ++n) {
    int h = hex_value(*q);
    if (h < 0 || n >= 16) return fail("expected 1 to 16 hex digits");
    u = (u << 4) | static_cast<uint64_t>(h);
  }
  if (q >= end_ || n == 0) return fail("expected 1 to 16 hex digits");
  v = u;
  p_ = q + 1;
  return true;
}

bool Cursor::skip_value(int depth) noexcept {
  switch (peek()) {
    case '{':
      if (depth >= kMaxDepth) return fail("nesting too deep");
      return object([&](std::string_view) { return skip_value(depth + 1); });
    case '[':
      if (depth >= kMaxDepth) return fail("nesting too deep");
      return array([&] { return skip_value(depth + 1); });
    case '"': {
      const char* q = p_ + 1;
      while (q < end_ && *q != '"') {
        auto c = static_cast<unsigned char>(*q);
        if (c < 0x20) return fail("control character in string");
        if (c == '\\' && end_ - q < 2) break;
        q += (c == '\\') ? 2 : 1;
      }
      if (q >= end_) return fail("unterminated string");
      p_ = q + 1;
      return true;
    }
    case 't':
    case 'f': {
      bool b;
      return boolean(b);
    }
    case 'n':
      if (end_ - p_ >= 4 && std::memcmp(p_, "null", 4) == 0) {
        p_ += 4;
        return true;
      }
      return fail("unexpected literal");
    default: {
      std::string_view tok;
      return number_token(tok);
    }
  }
}

bool Cursor::raw_value(std::string& out) {
  skip_ws();
  const char* start = p_;
  if (!skip_value()) return false;
  out.assign(start, static_cast<size_t>(p_ - start));
  return true;
}

}  // namespace precprobe::json
