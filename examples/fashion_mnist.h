// Fashion-MNIST from Debian's dataset-fashion-mnist package: reads the gzipped idx files
// straight into tensors (zlib), so examples and end-to-end tests train on real data.
//
// Header-only and self-contained so that examples build on their own against an installed
// precprobe. Not thread-safe per call; call from one thread.
#pragma once

#include <torch/torch.h>
#include <zlib.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace fashion_mnist {

/// Where Debian installs the files; override with $FASHION_MNIST_DIR.
inline std::string default_dir() {
  const char* env = std::getenv("FASHION_MNIST_DIR");
  return env != nullptr && *env != '\0' ? env : "/usr/share/datasets/fashion-mnist";
}

/// Reads a whole gzip file. Throws std::runtime_error naming the file.
inline std::vector<uint8_t> read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    throw std::runtime_error("cannot open " + path +
                             " (install Debian's dataset-fashion-mnist, or set FASHION_MNIST_DIR)");
  }
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + n);
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) {
    throw std::runtime_error("cannot read " + path + ": " + (msg != nullptr ? msg : "gzip error"));
  }
  return out;
}

inline uint32_t be32(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) |
         uint32_t{b[at + 3]};
}

/// Images as float32 [N, 1, 28, 28] scaled to [0, 1].
inline torch::Tensor read_images(const std::string& path) {
  auto b = read_gz(path);
  if (b.size() < 16 || be32(b, 0) != 2051) throw std::runtime_error(path + ": not an idx3 file");
  const int64_t n = be32(b, 4), rows = be32(b, 8), cols = be32(b, 12);
  if (b.size() != static_cast<size_t>(16 + n * rows * cols)) {
    throw std::runtime_error(path + ": size does not match its header");
  }
  auto t = torch::from_blob(b.data() + 16, {n, 1, rows, cols}, torch::kUInt8).clone();
  return t.to(torch::kFloat32).div_(255.0);
}

/// Labels as int64 [N].
inline torch::Tensor read_labels(const std::string& path) {
  auto b = read_gz(path);
  if (b.size() < 8 || be32(b, 0) != 2049) throw std::runtime_error(path + ": not an idx1 file");
  const int64_t n = be32(b, 4);
  if (b.size() != static_cast<size_t>(8 + n)) {
    throw std::runtime_error(path + ": size does not match its header");
  }
  return torch::from_blob(b.data() + 8, {n}, torch::kUInt8).to(torch::kInt64);
}

struct Split {
  torch::Tensor images;  ///< [N, 1, 28, 28] float32, normalised when asked
  torch::Tensor labels;  ///< [N] int64 in 0..9
};

// Mean and standard deviation of the Fashion-MNIST training pixels.
inline constexpr double kMean = 0.2860;
inline constexpr double kStd = 0.3530;

/// Loads "train" or "t10k"; `normalise` maps pixels to (x - kMean) / kStd.
inline Split load(const std::string& split, bool normalise = true,
                  const std::string& dir = default_dir()) {
  Split s{read_images(dir + "/" + split + "-images-idx3-ubyte.gz"),
          read_labels(dir + "/" + split + "-labels-idx1-ubyte.gz")};
  if (normalise) s.images = (s.images - kMean) / kStd;
  return s;
}

}  // namespace fashion_mnist
