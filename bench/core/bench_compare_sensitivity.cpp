// How small an error `precprobe compare --first` finds, and how quiet it stays on healthy
// pairs (the table in docs/cli.md, "Sensitivity"). Not a Google Benchmark: it
// prints a table.
//
//   bench_compare_sensitivity A B [--step S] [--plant NAME]... [--list]
//                             [--noise-factor F] [--inherited-weight W] [--verbose]
//
// A and B are dumps of the same program (e.g. the example with --bf16 and without). First
// the healthy pair: every step compared, the number of noise and divergent ops and the
// largest ratio. Then, for each op NAME ("aten::addmm.0.forward") at step S, an error is
// planted in A's record of it: every output's statistics (min, max, mean, norm) scaled by
// 1 + eps, which is what the op's outputs multiplied by 1 + eps would record, its inputs
// untouched. The smallest eps of the grid for which `compare --first` on step S names that
// op is printed with the op's ratio, and the op named instead when it is another.
// --list prints the names of step S's ops of A; --verbose the planted op's error, inherited
// error, bound and ratio at each eps. The table in docs/cli.md was made with it.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "precprobe/analysis.h"
#include "precprobe/reader.h"

namespace {

precprobe::DumpData load(const std::string& path, std::optional<int64_t> step) {
  precprobe::DumpReader reader(path);
  precprobe::RecordFilter filter;
  if (step) filter.step_min = filter.step_max = *step;
  precprobe::DumpData data;
  data.ranks = reader.ranks();
  data.ops = reader.ops(filter);
  data.scaler = reader.scaler(filter);
  return data;
}

void scale_outputs(precprobe::OpRecord& op, double factor) {
  for (precprobe::Arg& arg : op.outputs) {
    if (!arg.is_tensor()) continue;
    precprobe::TensorStats& t = *arg.tensor;
    t.min *= factor;
    t.max *= factor;
    t.mean *= factor;
    t.norm *= factor;
    t.hash.reset();
  }
}

int usage() {
  std::fprintf(
      stderr,
      "usage: bench_compare_sensitivity A B [--step S] [--plant NAME]... [--list]\n"
      "                                 [--noise-factor F] [--inherited-weight W] [--verbose]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::string> positional, plants;
  int64_t step = 1;
  bool list = false, verbose = false;
  precprobe::CompareOptions options;
  options.first = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--step")
      step = std::stoll(value());
    else if (a == "--plant")
      plants.push_back(value());
    else if (a == "--list")
      list = true;
    else if (a == "--verbose")
      verbose = true;
    else if (a == "--noise-factor")
      options.noise_factor = std::stod(value());
    else if (a == "--inherited-weight")
      options.inherited_weight = std::stod(value());
    else if (!a.empty() && a[0] == '-')
      return usage();
    else
      positional.push_back(a);
  }
  if (positional.size() != 2) return usage();

  if (list) {
    const precprobe::DumpData a = load(positional[0], step);
    for (const precprobe::OpRecord& r : a.ops)
      std::printf("%lld %s\n", (long long)r.seq, r.name().c_str());
    return 0;
  }

  {
    const precprobe::DumpData a = load(positional[0], std::nullopt);
    const precprobe::DumpData b = load(positional[1], std::nullopt);
    const precprobe::CompareResult r = precprobe::compare_dumps(a, b, options);
    std::printf("healthy pair: %lld steps compared, %lld match, %lld noise, %lld divergent",
                (long long)r.groups_compared, (long long)r.match_ops, (long long)r.noise_ops,
                (long long)r.divergent_ops);
    if (r.max_noise)
      std::printf(", largest noise ratio %.3g (%s, step %lld)", r.max_noise->ratio,
                  r.max_noise->name.c_str(), (long long)r.max_noise->step);
    if (r.first)
      std::printf("\n  first divergent: %s step %lld ratio %.3g", r.first->name.c_str(),
                  (long long)r.first->step, r.first->ratio);
    std::printf("\n");
  }

  const precprobe::DumpData a = load(positional[0], step);
  const precprobe::DumpData b = load(positional[1], step);
  options.step = step;
  const std::vector<double> grid = {1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10};
  const std::string header = "planted op (step " + std::to_string(step) + ")";
  std::printf("%-44s %8s %12s %10s  %s\n", header.c_str(), "ratio@0", "smallest eps", "ratio",
              "named instead");
  for (const std::string& name : plants) {
    size_t index = a.ops.size();
    for (size_t i = 0; i < a.ops.size(); ++i)
      if (a.ops[i].name() == name) index = i;
    if (index == a.ops.size()) {
      std::printf("%-44s not in A at step %lld\n", name.c_str(), (long long)step);
      continue;
    }
    const int64_t seq = a.ops[index].seq;
    double ratio0 = 0;
    {
      precprobe::CompareOptions all = options;
      all.first = false;
      const precprobe::CompareResult r = precprobe::compare_dumps(a, b, all);
      for (const precprobe::OpCompare& oc : r.ops)
        if (oc.seq_a == seq) ratio0 = oc.ratio;
    }
    std::string found = "-", ratio = "-", other;
    for (double eps : grid) {
      precprobe::DumpData planted = a;
      scale_outputs(planted.ops[index], 1 + eps);
      const precprobe::CompareResult r = precprobe::compare_dumps(planted, b, options);
      if (r.first && r.first->seq_a == seq) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%g", eps);
        found = buf;
        std::snprintf(buf, sizeof buf, "%.3g", r.first->ratio);
        ratio = buf;
        break;
      }
      if (r.first && other.empty()) other = r.first->name + " (eps " + std::to_string(eps) + ")";
      if (verbose) {
        precprobe::CompareOptions all = options;
        all.first = false;
        for (const precprobe::OpCompare& oc : precprobe::compare_dumps(planted, b, all).ops)
          if (oc.seq_a == seq)
            std::printf("  eps %g: %s error %g inherited %g bound %g ratio %g %s\n", eps,
                        oc.name.c_str(), oc.error, oc.inherited, oc.bound, oc.ratio,
                        oc.classification.c_str());
      }
    }
    std::printf("%-44s %8.3g %12s %10s  %s\n", name.c_str(), ratio0, found.c_str(), ratio.c_str(),
                other.c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_compare_sensitivity: %s\n", e.what());
  return 1;
}
