// precprobe::Scope: a thread-local stack of names, kept joined as "a/b/c" so that the
// observer reads the path without building it per op.
#include "precprobe/scope.h"

#include <string>
#include <vector>

namespace precprobe {
namespace {

struct ScopeStack {
  std::string path;
  std::vector<size_t> lengths;  // path length before each push
};

ScopeStack& stack() noexcept {
  thread_local ScopeStack s;
  return s;
}

}  // namespace

Scope::Scope(std::string name) {
  ScopeStack& s = stack();
  s.lengths.push_back(s.path.size());
  if (!s.path.empty()) s.path += '/';
  s.path += name;
}

Scope::~Scope() {
  ScopeStack& s = stack();
  if (s.lengths.empty()) return;
  s.path.resize(s.lengths.back());
  s.lengths.pop_back();
}

const std::string& Scope::current_path() noexcept { return stack().path; }

}  // namespace precprobe
