// A small JSON writer and pull parser for the dump records (private to precprobe::core).
//
// Records are encoded on the writer thread and decoded by the reader at millions of lines
// per second, so both sides are hand-written for the schema of docs/dump-format.md instead
// of going through a DOM. The parser works on untrusted input: every function checks
// bounds, nesting is limited to kMaxDepth, numbers that do not fit fail, and it allocates
// at most a few times the input size. A Cursor is used by one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace precprobe::json {

/// Nesting allowed inside a value (the records themselves use 4 levels).
inline constexpr int kMaxDepth = 64;

// ---- writing ----

/// Appends `s` as a quoted JSON string (escapes quotes, backslashes, control bytes).
void append_string(std::string& out, std::string_view s);
void append_int(std::string& out, int64_t v);
/// Shortest text that parses back to exactly `v`; NaN/±Inf as "nan", "inf", "-inf".
void append_double(std::string& out, double v);
/// Shortest text of `v` rounded to float32 (for statistics whose last bits carry no
/// information). Values outside the float32 range are written as doubles.
void append_float32(std::string& out, double v);
/// 16 lower-case hex digits in quotes.
void append_hex64(std::string& out, uint64_t v);
/// True when `text` is exactly one JSON value (surrounding whitespace allowed).
bool is_valid_value(std::string_view text);

// ---- reading ----

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
    skip_ws();
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool expect(char c) noexcept;
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

  /// An object key followed by ':'; the view is valid until the next call.
  bool key(std::string_view& k);
  bool string(std::string& out);
  bool int64(int64_t& v) noexcept;
  bool int32(int32_t& v) noexcept;
  bool uint32(uint32_t& v) noexcept;
  /// A number, or one of the strings "nan", "inf", "-inf".
  bool number(double& v) noexcept;
  /// Like number(), then rounded to float32 when that is finite (see append_float32).
  bool number_float32(double& v) noexcept;
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
  bool string_slow(std::string& out);
  bool number_token(std::string_view& tok) noexcept;

  const char* p_;
  const char* end_;
  const char* begin_;
  const char* error_ = nullptr;
  size_t error_pos_ = 0;
  std::string key_scratch_;
};

}  // namespace precprobe::json
