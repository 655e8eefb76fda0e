// NameMatcher: the `list` of a task section, precompiled once, matched from any thread.
//
// Plain entries match as substrings, which covers exact full names too: an entry like
// "aten::addmm.0.forward" only occurs inside that one name. "name-regex(...)" entries are
// ECMAScript regexes searched anywhere in the name (anchor with ^...$ for a full match).
// std::regex backtracks: nested quantifiers like (a|aa)*b take exponential time, so keep
// patterns simple (docs/config.md says so). No cache: names carry per-step call counts, so
// a name cache would only grow; the probe may cache per op if std::regex ever shows up in a
// profile.
#include <regex>
#include <string>
#include <vector>

#include "precprobe/error.h"
#include "precprobe/options.h"

namespace precprobe {

namespace {
constexpr char kRegexPrefix[] = "name-regex(";
constexpr size_t kRegexPrefixLen = sizeof(kRegexPrefix) - 1;
constexpr size_t kMaxPatternChars = 1024;
}  // namespace

struct NameMatcher::Impl {
  std::vector<std::string> substrings;
  std::vector<std::regex> regexes;
};

NameMatcher::NameMatcher(const std::vector<std::string>& list) {
  if (list.empty()) return;
  auto impl = std::make_unique<Impl>();
  for (const std::string& entry : list) {
    if (entry.empty()) {
      throw Error(
          "list: an entry is the empty string; it would match every name. "
          "Remove it (an empty list already means 'all')");
    }
    if (entry.compare(0, kRegexPrefixLen, kRegexPrefix) != 0) {
      impl->substrings.push_back(entry);
      continue;
    }
    if (entry.back() != ')' || entry.size() == kRegexPrefixLen + 1) {
      throw Error("list entry '" + entry +
                  "': a regex entry must be written name-regex(PATTERN) with a non-empty "
                  "PATTERN and the closing ')'");
    }
    const std::string pattern = entry.substr(kRegexPrefixLen, entry.size() - kRegexPrefixLen - 1);
    // libstdc++ compiles regexes recursively: ~100k nested groups overflow the stack.
    if (pattern.size() > kMaxPatternChars) {
      throw Error("list entry 'name-regex(" + pattern.substr(0, 40) + "...)': the pattern has " +
                  std::to_string(pattern.size()) + " characters; allowed: at most " +
                  std::to_string(kMaxPatternChars));
    }
    try {
      impl->regexes.emplace_back(pattern, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      throw Error("list entry '" + entry + "': bad regular expression '" + pattern +
                  "' (ECMAScript syntax): " + e.what());
    }
  }
  impl_ = std::move(impl);
}

NameMatcher::NameMatcher() = default;
NameMatcher::~NameMatcher() = default;
NameMatcher::NameMatcher(NameMatcher&&) noexcept = default;
NameMatcher& NameMatcher::operator=(NameMatcher&&) noexcept = default;

bool NameMatcher::matches(const std::string& full_name) const {
  if (!impl_) return true;
  for (const std::string& s : impl_->substrings) {
    if (full_name.find(s) != std::string::npos) return true;
  }
  for (const std::regex& r : impl_->regexes) {
    if (std::regex_search(full_name, r)) return true;
  }
  return false;
}

bool NameMatcher::empty() const noexcept { return !impl_; }

}  // namespace precprobe
