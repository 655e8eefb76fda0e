// Full tensors for task "tensor": NumPy .npy v1.0 (header + raw little-endian data, C
// order), compressed as one zstd frame. `zstd -d x.npy.zst` then `numpy.load` reads it.
#include <ATen/ATen.h>
#include <sys/stat.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "capture/observer_internal.h"

namespace precprobe {
namespace detail {
namespace {

// NumPy's dtype descriptor; empty when NumPy has no such type.
std::string descr(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "<f4";
    case at::kDouble:
      return "<f8";
    case at::kHalf:
      return "<f2";
    case at::kBool:
      return "|b1";
    case at::kByte:
      return "|u1";
    case at::kChar:
      return "|i1";
    case at::kShort:
      return "<i2";
    case at::kInt:
      return "<i4";
    case at::kLong:
      return "<i8";
    case at::kComplexFloat:
      return "<c8";
    case at::kComplexDouble:
      return "<c16";
    default:
      return "";
  }
}

std::string npy_header(const std::string& dtype, at::IntArrayRef shape) {
  std::string dict = "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) dict += ", ";
    dict += std::to_string(shape[i]);
  }
  if (shape.size() == 1) dict += ',';  // a Python 1-tuple: "(5,)"
  dict += "), }";
  // magic(6) + version(2) + length(2) + dict + padding + '\n' is a multiple of 64.
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string h("\x93NUMPY\x01\x00", 8);
  h += static_cast<char>(dict.size() & 0xff);
  h += static_cast<char>((dict.size() >> 8) & 0xff);
  return h + dict;
}

bool make_dirs(const std::string& dir) {
  for (size_t p = 1; p <= dir.size(); ++p) {
    if (p == dir.size() || dir[p] == '/') {
      std::string part = dir.substr(0, p);
      if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
  }
  return true;
}

}  // namespace

std::string write_npy_zst(const at::Tensor& tensor, const std::string& path, int level) {
  try {
    at::Tensor t = tensor.detach();
    if (t.layout() != at::kStrided) return "not a strided tensor";
    // Autograd's ZeroTensor has no memory (data_ptr() is null); a conjugate or negative view
    // holds its base's values with a bit saying how to read them: the values, written out.
    if (t._is_zerotensor()) t = at::zeros(t.sizes(), t.options());
    t = t.resolve_conj().resolve_neg();
    if (!t.is_cpu()) t = t.cpu();
    if (t.scalar_type() == at::kBFloat16) t = t.to(at::kFloat);
    std::string dtype = descr(t.scalar_type());
    if (dtype.empty()) return std::string("no NumPy dtype for ") + c10::toString(t.scalar_type());
    t = t.contiguous();
    std::string raw = npy_header(dtype, t.sizes());
    const size_t header = raw.size();
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    raw.resize(header + bytes);
    if (bytes) std::memcpy(&raw[header], t.data_ptr(), bytes);  // x86/ARM: little-endian

    std::string packed(ZSTD_compressBound(raw.size()), '\0');
    size_t n = ZSTD_compress(&packed[0], packed.size(), raw.data(), raw.size(), level);
    if (ZSTD_isError(n)) return ZSTD_getErrorName(n);
    packed.resize(n);

    auto slash = path.rfind('/');
    if (slash != std::string::npos && !make_dirs(path.substr(0, slash)))
      return "cannot create " + path.substr(0, slash) + ": " + std::strerror(errno);
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
    if (!f) return std::string("cannot open: ") + std::strerror(errno);
    if (std::fwrite(packed.data(), 1, packed.size(), f.get()) != packed.size())
      return std::string("write failed: ") + std::strerror(errno);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace detail
}  // namespace precprobe
