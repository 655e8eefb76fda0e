// SeedReport: lookup, text and JSON renderings.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "precprobe/seed.h"

namespace precprobe {

const SeedSetting* SeedReport::find_applied(const std::string& name) const {
  for (const auto& s : applied) {
    if (s.name == name) {
      return &s;
    }
  }
  return nullptr;
}

const SeedSkipped* SeedReport::find_skipped(const std::string& name) const {
  for (const auto& s : skipped) {
    if (s.name == name) {
      return &s;
    }
  }
  return nullptr;
}

std::string SeedReport::summary() const {
  return fmt::format(
      "seed_all({}{}): {} settings, {} skipped, {} warnings, {} intra-op thread{}{}", seed,
      deterministic ? (warn_only ? ", deterministic warn_only" : ", deterministic") : "",
      applied.size(), skipped.size(), warnings.size(), intra_op_threads,
      intra_op_threads == 1 ? "" : "s", threads_pinned ? " (pinned)" : "");
}

std::string SeedReport::to_string() const {
  std::string out = summary() + "\n";
  out += fmt::format(
      "  LibTorch {}, CUDA {}\n", torch_version,
      cuda_available ? fmt::format("{} device(s)", cuda_devices) : std::string("not available"));
  out += fmt::format("  threads: {} intra-op{}, {} inter-op\n", intra_op_threads,
                     threads_pinned ? " (pinned)" : "", inter_op_threads);
  out += "  set:\n";
  for (const auto& s : applied) {
    out += fmt::format("    {} = {}\n", s.name, s.value);
  }
  out += "  not set:\n";
  for (const auto& s : skipped) {
    out += fmt::format("    {}: {}\n", s.name, s.reason);
  }
  for (const auto& w : warnings) {
    out += fmt::format("  warning: {}\n", w);
  }
  return out;
}

nlohmann::json SeedReport::to_json_value() const {
  nlohmann::json j;
  j["seed"] = seed;
  j["deterministic"] = deterministic;
  j["warn_only"] = warn_only;
  j["intra_op_threads"] = intra_op_threads;
  j["threads_pinned"] = threads_pinned;
  j["inter_op_threads"] = inter_op_threads;
  j["cuda_available"] = cuda_available;
  j["cuda_devices"] = cuda_devices;
  j["torch_version"] = torch_version;
  j["applied"] = nlohmann::json::array();
  for (const auto& s : applied) {
    j["applied"].push_back({{"name", s.name}, {"value", s.value}});
  }
  j["skipped"] = nlohmann::json::array();
  for (const auto& s : skipped) {
    j["skipped"].push_back({{"name", s.name}, {"reason", s.reason}});
  }
  j["warnings"] = warnings;
  return j;
}

std::string SeedReport::to_json() const {
  return to_json_value().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::ostream& operator<<(std::ostream& os, const SeedReport& report) {
  return os << report.to_string();
}

}  // namespace precprobe
