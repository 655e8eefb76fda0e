// The precprobe command line tool (placeholder until the reader lands).
#include <cstdio>

int main() {
  std::puts("precprobe");
  return 0;
}
