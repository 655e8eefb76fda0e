// A small JSON writer and pull parser for the dump records (private to precprobe::core).
//
// Records are encoded on the writer thread and decoded by the reader at millions of lines
// per second, so both sides are hand-written for the schema of docs/dump-format.md instead
// of going through a DOM. The parser works on untrusted input: every function checks
// bounds, nesting is limited to kMaxDepth, numbers that do not fit fail, and it allocates
// at most a few times the input size. A Cursor is used by one thread at a time.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace precprobe::json {

/// Nesting allowed inside a value (the records themselves use 4 levels).
inline constexpr int kMaxDepth = 64;

// ---- writing ----

/// Appends to a std::string through a raw pointer, so a record costs no per-field size
/// checks: callers reserve() an upper bound for the next fields, then write them. The
/// string has its final size after finish() (called by the destructor too).
class TextOut {
 public:
  explicit TextOut(std::string& s) : s_(s) {
    size_t used = s.size();
    s.resize(used + 1024);
    p_ = s.data() + used;
    end_ = s.data() + s.size();
  }
  ~TextOut() { finish(); }
  TextOut(const TextOut&) = delete;
  TextOut& operator=(const TextOut&) = delete;

  void finish() {
    if (p_ != nullptr) s_.resize(static_cast<size_t>(p_ - s_.data()));
    p_ = end_ = nullptr;
  }
  void reserve(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) grow(n);
  }
  void put(char c) { *p_++ = c; }
  template <size_t N>
  void lit(const char (&text)[N]) {
    std::memcpy(p_, text, N - 1);
    p_ += N - 1;
  }
  void raw(std::string_view text) {
    std::memcpy(p_, text.data(), text.size());
    p_ += text.size();
  }
  /// Replaces the last character (a trailing ',' by a closing bracket).
  void replace_last(char c) { p_[-1] = c; }
  char last() const { return p_[-1]; }

  static constexpr size_t kMaxNumber = 32;
  void int64(int64_t v);
  /// Shortest text that parses back to exactly `v`; NaN/±Inf as null (the record writer
  /// adds the "<key>_nonfinite" field where the non-finite value itself is information).
  void number(double v);
  /// Shortest text of `v` rounded to float32 (statistics whose last bits carry no
  /// information). Values outside the float32 range are written as doubles.
  void float32(double v);
  /// 16 lower-case hex digits in quotes.
  void hex64(uint64_t v);
  /// A quoted JSON string; needs at most string_bound(s.size()) bytes.
  void string(std::string_view s);
  static constexpr size_t string_bound(size_t n) { return 6 * n + 2; }

 private:
  void grow(size_t n);
  std::string& s_;
  char* p_ = nullptr;
  char* end_ = nullptr;
};

/// True when `text` is exactly one JSON value (surrounding whitespace allowed).
bool is_valid_value(std::string_view text);

// ---- reading ----

/// `"name":` prepared for matching with one 8-byte load (see Cursor::match).
struct KeyLiteral {
  constexpr explicit KeyLiteral(std::string_view name) noexcept : size(name.size() + 3) {
    text[0] = '"';
    for (size_t i = 0; i < name.size() && i < 12; ++i) text[i + 1] = name[i];
    text[name.size() + 1] = '"';
    text[name.size() + 2] = ':';
    for (size_t i = 0; i < 8 && i < size; ++i) {
      head |= uint64_t{static_cast<unsigned char>(text[i])} << (8 * i);
      mask |= uint64_t{0xff} << (8 * i);
    }
  }
  char text[16] = {};
  size_t size;
  uint64_t head = 0;  // the first 8 bytes, little-endian
  uint64_t mask = 0;
};

class Cursor {
 public:
  explicit Cursor(std::string_view text) noexcept
      : p_(text.data()), end_(text.data() + text.size()), begin_(text.data()) {}

  /// Records the first failure; always returns false so callers can `return fail(...)`.
  bool fail(const char* what) noexcept;
  bool failed() const noexcept { return error_ != nullptr; }
  /// "<what> at byte <n>" for the first failure.
  std::string error_message() const;

  void skip_ws() noexcept {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  /// Consumes `c` (after whitespace) when it is next.
  bool consume(char c) noexcept {
    if (p_ < end_ && *p_ == c) {  // the writer puts no blanks between tokens
      ++p_;
      return true;
    }
    skip_ws();
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool expect(char c) noexcept { return consume(c) || expect_failed(c); }
  /// True when only whitespace is left.
  bool at_end() noexcept {
    skip_ws();
    return p_ == end_;
  }
  /// The next non-blank byte without consuming it (0 at the end).
  char peek() noexcept {
    skip_ws();
    return p_ < end_ ? *p_ : '\0';
  }

  /// Where the cursor is, for rewind().
  const char* position() const noexcept { return p_; }
  /// Goes back to `pos` (from position()) and forgets any failure since: a fast path that
  /// gave up hands the same text to a general one.
  void rewind(const char* pos) noexcept {
    p_ = pos;
    error_ = nullptr;
  }

  /// literal() for a string literal: the length is a constant, so the comparison is a few
  /// inline word compares instead of a call.
  template <size_t N>
  __attribute__((always_inline)) bool token(const char (&text)[N]) noexcept {
    constexpr size_t n = N - 1;
    if (static_cast<size_t>(end_ - p_) < n) return false;
    if constexpr (n >= 8) {  // 8-byte words, the last one overlapping
      uint64_t diff = 0;
      for (size_t i = 0; i + 8 <= n; i += 8) diff |= load(p_ + i) ^ load(text + i);
      if constexpr (n % 8 != 0) diff |= load(p_ + n - 8) ^ load(text + n - 8);
      if (diff != 0) return false;
    } else if constexpr (n >= 4) {  // two 4-byte words, overlapping
      if (((load4(p_) ^ load4(text)) | (load4(p_ + n - 4) ^ load4(text + n - 4))) != 0)
        return false;
    } else {
      for (size_t i = 0; i < n; ++i)
        if (p_[i] != text[i]) return false;
    }
    p_ += n;
    return true;
  }

  /// Consumes `text` when it comes next, byte for byte; nothing otherwise.
  bool literal(std::string_view text) noexcept {
    if (static_cast<size_t>(end_ - p_) < text.size() ||
        std::memcmp(p_, text.data(), text.size()) != 0) {
      return false;
    }
    p_ += text.size();
    return true;
  }
  /// Consumes `"name":` when it comes next, byte for byte; nothing otherwise.
  bool quoted_key(std::string_view name) noexcept {
    size_t n = name.size();
    if (static_cast<size_t>(end_ - p_) < n + 3 || p_[0] != '"' || p_[n + 1] != '"' ||
        p_[n + 2] != ':') {
      return false;
    }
    for (size_t i = 0; i < n; ++i) {  // names are short: a loop beats a memcmp call
      if (p_[i + 1] != name[i]) return false;
    }
    p_ += n + 3;
    return true;
  }
  /// Consumes the key literal when it comes next; nothing otherwise.
  bool match(const KeyLiteral& k) noexcept {
    if (end_ - p_ < 16) return literal(std::string_view(k.text, k.size));
    uint64_t w;
    std::memcpy(&w, p_, 8);
    if ((w & k.mask) != k.head) return false;
    for (size_t i = 8; i < k.size; ++i) {
      if (p_[i] != k.text[i]) return false;
    }
    p_ += k.size;
    return true;
  }
  /// An object key followed by ':'; the view is valid until the next call.
  inline bool key(std::string_view& k);
  inline bool string(std::string& out);
  inline bool int64(int64_t& v) noexcept;
  inline bool int32(int32_t& v) noexcept;
  inline bool uint32(uint32_t& v) noexcept;
  /// A number, null (NaN: format_version 2) or one of the strings "nan", "inf", "-inf"
  /// (format_version 1).
  inline bool number(double& v) noexcept;
  /// The value of a "<key>_nonfinite" field: one of the strings "nan", "inf", "-inf".
  bool nonfinite_name(double& v) noexcept;
  /// Like number(), then rounded to float32 when that is finite (see TextOut::float32).
  bool number_float32(double& v) noexcept {
    if (!number(v)) return false;
    auto f = static_cast<float>(v);
    if (std::isfinite(f)) v = static_cast<double>(f);
    return true;
  }
  bool boolean(bool& v) noexcept;
  /// A string of 1 to 16 hex digits.
  bool hex64(uint64_t& v) noexcept;
  /// Skips any value, nested at most kMaxDepth - depth deep.
  bool skip_value(int depth = 0) noexcept;
  /// Skips any value and returns its exact text.
  bool raw_value(std::string& out);

  /// Walks the members of an object; `on_member(key)` must consume the value.
  template <class F>
  bool object(F&& on_member) {
    if (!expect('{')) return false;
    if (consume('}')) return true;
    do {
      std::string_view k;
      if (!key(k) || !on_member(k)) return false;
    } while (consume(','));
    return expect('}');
  }

  /// Walks the elements of an array; `on_element()` must consume one value.
  template <class F>
  bool array(F&& on_element) {
    if (!expect('[')) return false;
    if (consume(']')) return true;
    do {
      if (!on_element()) return false;
    } while (consume(','));
    return expect(']');
  }

 private:
  static uint64_t load(const char* p) noexcept {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  static uint32_t load4(const char* p) noexcept {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }

  // The inline functions below handle the common case (what our writer produces) and
  // leave everything else, errors included, to these.
  bool expect_failed(char c) noexcept;
  bool key_slow(std::string_view& k);
  bool string_slow(std::string& out);
  bool int64_slow(int64_t& v) noexcept;
  bool number_slow(double& v) noexcept;
  /// [p_, end) is a valid number without exponent of at most 19 digits.
  bool plain_number(const char* end, double& v) noexcept;
  bool number_token(std::string_view& tok) noexcept;

  const char* p_;
  const char* end_;
  const char* begin_;
  const char* error_ = nullptr;
  size_t error_pos_ = 0;
  std::string key_scratch_;
};

namespace detail {
inline bool is_digit(char c) noexcept { return static_cast<unsigned char>(c - '0') < 10; }
inline bool is_plain(char c) noexcept {
  return c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20;
}

/// s == [p, p + n), without a call to memcmp for short strings.
inline bool equal(const std::string& s, const char* p, size_t n) noexcept {
  if (s.size() != n) return false;
  const char* a = s.data();
  for (; n >= 8; n -= 8, a += 8, p += 8) {
    uint64_t x, y;
    std::memcpy(&x, a, 8);
    std::memcpy(&y, p, 8);
    if (x != y) return false;
  }
  for (; n > 0; --n) {
    if (*a++ != *p++) return false;
  }
  return true;
}

// Eight digits at a time (fast_float's SWAR technique, extended to a partial word): the
// statistics are mostly long fractions ("-2.3456788063049316") and counts of varying length,
// whose digits a byte loop walks one hard-to-predict branch at a time.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
inline constexpr bool kSwarDigits = true;
#else
inline constexpr bool kSwarDigits = false;
#endif

inline uint64_t load8(const char* p) noexcept {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
/// The high bit of each byte of `v` (little-endian) that is not an ASCII digit. Carries
/// between bytes can only start at a non-digit byte, so the lowest set bit is exact.
inline uint64_t non_digit_bits(uint64_t v) noexcept {
  return ((v + 0x4646464646464646) | (v - 0x3030303030303030)) & 0x8080808080808080;
}
/// The value of 8 ASCII digits loaded little-endian (first digit in the low byte).
inline uint32_t eight_digits_value(uint64_t v) noexcept {
  constexpr uint64_t kMask = 0x000000FF000000FF;
  constexpr uint64_t kMul1 = 0x000F424000000064;  // 100 + (1000000 << 32)
  constexpr uint64_t kMul2 = 0x0000271000000001;  // 1 + (10000 << 32)
  v -= 0x3030303030303030;
  v = (v * 10) + (v >> 8);
  v = (((v & kMask) * kMul1) + (((v >> 16) & kMask) * kMul2)) >> 32;
  return static_cast<uint32_t>(v);
}

inline constexpr uint64_t kPow10Int[] = {1,
                                         10,
                                         100,
                                         1000,
                                         10000,
                                         100000,
                                         1000000,
                                         10000000,
                                         100000000,
                                         1000000000,
                                         10000000000,
                                         100000000000,
                                         1000000000000,
                                         10000000000000,
                                         100000000000000,
                                         1000000000000000,
                                         10000000000000000,
                                         100000000000000000,
                                         1000000000000000000,
                                         10000000000000000000u};

/// m / 10^frac rounded to the nearest double (ties to even), exactly, for 2^53 < m and
/// frac <= 19; false where this method does not apply (then from_chars decides).
bool divide_pow10(uint64_t m, int frac, double& v) noexcept;

/// Accumulates the digits at q into m while `nd` (digits so far) stays at most `max_digits`
/// (at most 19, so m cannot overflow). Returns the first byte not consumed.
inline const char* scan_digits(const char* q, const char* end, uint64_t& m, int& nd,
                               int max_digits = 19) noexcept {
  if constexpr (kSwarDigits) {
    while (end - q >= 8) {
      const uint64_t w = load8(q);
      const uint64_t stop = non_digit_bits(w);
      const int n = stop == 0 ? 8 : __builtin_ctzll(stop) >> 3;
      if (n > max_digits - nd) break;  // the byte loop takes what still fits
      if (n == 8) {
        m = m * 100000000 + eight_digits_value(w);
        nd += 8;
        q += 8;
        continue;
      }
      if (n > 0) {
        // The n digits into the top bytes, '0's below them: one 8-digit conversion.
        const uint64_t digits = (w << (8 * (8 - n))) | (0x3030303030303030 >> (8 * n));
        m = m * kPow10Int[n] + eight_digits_value(digits);
        nd += n;
        q += n;
      }
      return q;
    }
  }
  while (q < end && is_digit(*q) && nd < max_digits) {
    m = m * 10 + static_cast<uint64_t>(*q++ - '0');
    ++nd;
  }
  return q;
}
/// The first byte at or after q that is '"', '\\' or a control character (end if none).
inline const char* scan_plain(const char* q, const char* end) noexcept {
  if constexpr (kSwarDigits) {
    constexpr uint64_t kOnes = 0x0101010101010101, kHigh = 0x8080808080808080;
    for (; end - q >= 8; q += 8) {
      const uint64_t w = load8(q);
      const uint64_t quote = w ^ (kOnes * '"'), slash = w ^ (kOnes * '\\');
      // Bytes that are zero (a match) or below 0x20; borrows only run above the lowest hit.
      const uint64_t hit =
          (((quote - kOnes) & ~quote) | ((slash - kOnes) & ~slash) | ((w - kOnes * 0x20) & ~w)) &
          kHigh;
      if (hit != 0) return q + (__builtin_ctzll(hit) >> 3);
    }
  }
  while (q < end && is_plain(*q)) ++q;
  return q;
}
}  // namespace detail

inline bool Cursor::key(std::string_view& k) {
  if (p_ < end_ && *p_ == '"') {
    const char* q = p_ + 1;
    q = detail::scan_plain(q, end_);
    if (end_ - q >= 2 && q[0] == '"' && q[1] == ':') {
      k = std::string_view(p_ + 1, static_cast<size_t>(q - p_ - 1));
      p_ = q + 2;
      return true;
    }
  }
  return key_slow(k);
}

inline bool Cursor::string(std::string& out) {
  if (p_ < end_ && *p_ == '"') {
    const char* q = p_ + 1;
    q = detail::scan_plain(q, end_);
    if (q < end_ && *q == '"') {
      // Records repeat their strings (dtype, device, op and parameter names): comparing
      // is cheaper than std::string's out-of-line assign.
      const auto n = static_cast<size_t>(q - p_ - 1);
      if (!detail::equal(out, p_ + 1, n)) out.assign(p_ + 1, n);
      p_ = q + 1;
      return true;
    }
  }
  return string_slow(out);
}

inline bool Cursor::int64(int64_t& v) noexcept {
  const char* q = p_;
  bool neg = q < end_ && *q == '-';
  if (neg) ++q;
  if (end_ - q >= 2 && q[0] == '0' && (q[1] == ',' || q[1] == '}' || q[1] == ']')) {
    v = 0;  // most counts (nan, pinf, ninf) are 0
    p_ = q + 1;
    return true;
  }
  const char* digits = q;
  uint64_t u = 0;
  int n = 0;
  q = detail::scan_digits(q, end_, u, n, 18);  // 18 digits always fit
  bool ends = q == end_ || (*q != '.' && *q != 'e' && *q != 'E' && !detail::is_digit(*q));
  if (n > 0 && ends && (n == 1 || *digits != '0')) {
    v = neg ? -static_cast<int64_t>(u) : static_cast<int64_t>(u);
    p_ = q;
    return true;
  }
  return int64_slow(v);
}

inline bool Cursor::int32(int32_t& v) noexcept {
  int64_t w = 0;
  if (!int64(w)) return false;
  if (w < INT32_MIN || w > INT32_MAX) return fail("integer out of range");
  v = static_cast<int32_t>(w);
  return true;
}

inline bool Cursor::uint32(uint32_t& v) noexcept {
  int64_t w = 0;
  if (!int64(w)) return false;
  if (w < 0 || w > int64_t{UINT32_MAX}) return fail("integer out of range");
  v = static_cast<uint32_t>(w);
  return true;
}

// Clinger's fast path: up to 19 digits whose value is at most 2^53, without exponent, and
// at most 22 decimals is exact with one division (both operands are exact doubles). Other
// numbers of up to 19 digits without exponent (e.g. the 17 digits of a float's shortest
// double text) go straight to from_chars; everything else to the validating slow path.
inline bool Cursor::number(double& v) noexcept {
  static constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                      1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                      1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  const char* q = p_;
  bool neg = q < end_ && *q == '-';
  if (neg) ++q;
  const char* int_start = q;
  uint64_t m = 0;
  int nd = 0;
  q = detail::scan_digits(q, end_, m, nd);
  if (nd == 0 || (nd > 1 && *int_start == '0')) return number_slow(v);
  int frac = 0;
  if (q < end_ && *q == '.') {
    ++q;
    const int int_digits = nd;
    q = detail::scan_digits(q, end_, m, nd);
    frac = nd - int_digits;
    if (frac == 0) return number_slow(v);
  }
  if (q < end_ && (*q == 'e' || *q == 'E' || *q == '.' || detail::is_digit(*q))) {
    return number_slow(v);
  }
  if (m > (uint64_t{1} << 53)) {
    if (!detail::divide_pow10(m, frac, v)) return plain_number(q, v);
    if (neg) v = -v;
    p_ = q;
    return true;
  }
  double d = static_cast<double>(m) / kPow10[frac];
  v = neg ? -d : d;
  p_ = q;
  return true;
}

}  // namespace precprobe::json
