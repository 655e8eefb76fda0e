// precprobe_make_anomaly_dump DIR: writes the hand-made on_anomaly dump of anomaly_dump.h
// (the origin aten::exp.0.forward with its saved input) for the repro_e2e test.
#include <cstdio>
#include <exception>

#include "anomaly_dump.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  try {
    precprobe::test::write_anomaly_dump(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
