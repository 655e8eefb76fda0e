#include "arg_rules.h"

#include <algorithm>
#include <charconv>
#include <mutex>

namespace precprobe::analysis_detail {

bool same_after_broadcast(const std::string& x, const std::string& y) {
  auto items = [](const std::string& s, std::vector<std::string>& out) {
    if (s.size() < 2 || s.front() != '[' || s.back() != ']') return false;
    const std::string body = s.substr(1, s.size() - 2);
    if (body.empty() || body.find_first_of("[]{}\"") != std::string::npos) return false;
    size_t start = 0;
    for (;;) {
      const size_t comma = body.find(',', start);
      out.push_back(body.substr(start, comma - start));
      if (comma == std::string::npos) return true;
      start = comma + 1;
    }
  };
  std::vector<std::string> a, b;
  if (!items(x, a) || !items(y, b) || (a.size() != 1 && b.size() != 1) || a.size() == b.size())
    return false;
  const std::string& one = a.size() == 1 ? a[0] : b[0];
  const std::vector<std::string>& many = a.size() == 1 ? b : a;
  return std::all_of(many.begin(), many.end(), [&](const std::string& v) { return v == one; });
}

bool spelled_default(const Arg& a, const Arg& b) {
  return !a.is_tensor() && !b.is_tensor() && (a.value == "null") != (b.value == "null");
}

void ProgramConstants::add(const std::vector<OpRecord>& ops) {
  std::string key;
  const std::unique_lock<std::shared_mutex> lock(mutex_);
  for (const OpRecord& r : ops) {
    for (size_t i = 0; i < r.inputs.size(); ++i) {
      if (r.inputs[i].is_tensor()) continue;
      site_key(r, i, key);
      Site& s = sites_[key];
      if (s.steps == 0) {
        s.value = r.inputs[i].value;
      } else if (s.value != r.inputs[i].value) {
        s.varies = true;
      }
      if (s.last_step != r.step) ++s.steps;
      s.last_step = r.step;
    }
  }
}

bool ProgramConstants::constant(const OpRecord& r, size_t input) const {
  std::string key;
  site_key(r, input, key);
  const std::shared_lock<std::shared_mutex> lock(mutex_);
  auto it = sites_.find(key);
  return it != sites_.end() && !it->second.varies && it->second.steps >= 2;
}

bool ProgramConstants::settled(const OpRecord& r, size_t input) const {
  std::string key;
  site_key(r, input, key);
  const std::shared_lock<std::shared_mutex> lock(mutex_);
  auto it = sites_.find(key);
  return it != sites_.end() && it->second.varies;
}

void ProgramConstants::site_key(const OpRecord& r, size_t input, std::string& key) {
  // rank \x1f op.call.direction \x1f input, written in place (OpRecord::name's spelling).
  char digits[24];
  key.clear();
  key.reserve(r.op.size() + 48);
  auto number = [&](int64_t v) {
    const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, v);
    key.append(digits, end);
  };
  number(r.rank);
  key += '\x1f';
  key += r.op;
  key += '.';
  number(r.call);
  key += '.';
  key += to_string(r.dir);
  key += '\x1f';
  number(static_cast<int64_t>(input));
}

}  // namespace precprobe::analysis_detail
