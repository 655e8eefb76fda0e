#include "arg_rules.h"

#include <algorithm>

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
  std::string base, key;
  for (const OpRecord& r : ops) {
    base.clear();  // made for the first non-tensor input: most ops have none
    for (size_t i = 0; i < r.inputs.size(); ++i) {
      if (r.inputs[i].is_tensor()) continue;
      if (base.empty()) base = site(r);
      key = base;
      key += std::to_string(i);
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
  auto it = sites_.find(site(r) + std::to_string(input));
  return it != sites_.end() && !it->second.varies && it->second.steps >= 2;
}

bool ProgramConstants::settled(const OpRecord& r, size_t input) const {
  auto it = sites_.find(site(r) + std::to_string(input));
  return it != sites_.end() && it->second.varies;
}

std::string ProgramConstants::site(const OpRecord& r) {
  return std::to_string(r.rank) + '\x1f' + r.name() + '\x1f';
}

}  // namespace precprobe::analysis_detail
