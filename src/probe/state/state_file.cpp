// save_state / load_state / read_state (precprobe/state.h): the safetensors layout, written
// and checked here with the core's JSON (nlohmann). The format's rules, as huggingface/
// safetensors' reference implementation (safetensors/src/tensor.rs) applies them:
//   - bytes 0..8: N, the header's length, an unsigned 64-bit little-endian integer;
//   - bytes 8..8+N: the header, UTF-8 JSON, an object starting with '{' (padded with spaces
//     to a multiple of 8, so that the data that follows is aligned), at most 100 000 000 bytes;
//   - each tensor: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, offsets
//     relative to the byte after the header, end - begin = numel * element size; sorted by
//     offset the tensors cover the data from 0 without holes or overlaps, and the last end is
//     the end of the file; names are unique; "__metadata__" is a map of strings to strings;
//   - values little-endian, C order, no strides.
// Threads: any; no shared state.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/nn/module.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "precprobe/error.h"
#include "precprobe/state.h"
#include "support/torch_compat.h"

namespace precprobe {
namespace {

static_assert(sizeof(void*) == 8, "the state file's offsets are 64-bit");

constexpr uint64_t kMaxHeader = 100000000;  // the reference implementation's limit
constexpr const char* kMetadataKey = "__metadata__";

struct DtypeName {
  at::ScalarType type;
  const char* name;
};

// The format's names (safetensors' Dtype enum) of the types LibTorch has.
const DtypeName kDtypes[] = {
    {at::kBool, "BOOL"},
    {at::kByte, "U8"},
    {at::kChar, "I8"},
    {at::kShort, "I16"},
    {at::kHalf, "F16"},
    {at::kBFloat16, "BF16"},
    {at::kInt, "I32"},
    {at::kFloat, "F32"},
    {at::kDouble, "F64"},
    {at::kLong, "I64"},
#if PRECPROBE_TORCH_AT_LEAST(2, 1)
    {at::ScalarType::Float8_e5m2, "F8_E5M2"},
    {at::ScalarType::Float8_e4m3fn, "F8_E4M3"},
#endif
};

const char* dtype_name(at::ScalarType t) {
  for (const DtypeName& d : kDtypes)
    if (d.type == t) return d.name;
  return nullptr;
}

bool dtype_of(const std::string& name, at::ScalarType* t) {
  for (const DtypeName& d : kDtypes) {
    if (name == d.name) {
      *t = d.type;
      return true;
    }
  }
  return false;
}

std::string shape_text(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string quote_name(const std::string& name) { return "'" + name + "'"; }

// Our own reads and copies are not the program's ops: no observer sees them, no autograd.
struct Quiet {
  at::RecordFunctionGuard no_callbacks{false};
  at::NoGradGuard no_grad;
};

bool little_endian_host() {
  const uint16_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

void require_little_endian() {
  if (!little_endian_host())
    throw Error("precprobe: state files are little-endian; this host is big-endian");
}

/// An open file descriptor, closed on every path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      throw Error("precprobe: save_state: cannot write " + path + ": " + std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void read_at(int fd, void* data, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      throw Error("precprobe: cannot read " + path + ": " +
                  (r == 0 ? std::string("unexpected end of file") : std::strerror(errno)));
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

/// One tensor of a state file's header.
struct Entry {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::string dtype_text;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

/// A state file's header, checked against the format's rules.
struct Header {
  std::vector<Entry> entries;  // in the header's order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N
};

[[noreturn]] void bad_file(const std::string& path, const std::string& why) {
  throw Error("precprobe: " + path + " is not a valid state file (safetensors layout): " + why);
}

uint64_t checked_bytes(const Entry& e, const std::string& path) {
  uint64_t n = static_cast<uint64_t>(c10::elementSize(e.dtype));
  for (int64_t d : e.shape) {
    const uint64_t u = static_cast<uint64_t>(d);
    if (u != 0 && n > std::numeric_limits<uint64_t>::max() / u)
      bad_file(path, quote_name(e.name) + ": its shape overflows");
    n *= u;
  }
  return n;
}

Entry parse_entry(const std::string& name, const nlohmann::ordered_json& v,
                  const std::string& path) {
  Entry e;
  e.name = name;
  if (!v.is_object()) bad_file(path, quote_name(name) + " is not an object");
  auto dtype = v.find("dtype");
  auto shape = v.find("shape");
  auto offsets = v.find("data_offsets");
  if (dtype == v.end() || !dtype->is_string())
    bad_file(path, quote_name(name) + " has no \"dtype\" string");
  e.dtype_text = dtype->get<std::string>();
  if (!dtype_of(e.dtype_text, &e.dtype))
    bad_file(path, quote_name(name) + ": dtype " + e.dtype_text + " is not one LibTorch has");
  if (shape == v.end() || !shape->is_array())
    bad_file(path, quote_name(name) + " has no \"shape\" array");
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned()) bad_file(path, quote_name(name) + ": shape " + shape->dump());
    const uint64_t u = d.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad_file(path, quote_name(name) + ": shape " + shape->dump());
    e.shape.push_back(static_cast<int64_t>(u));
  }
  if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned())
    bad_file(path, quote_name(name) + " has no \"data_offsets\" [begin, end]");
  e.begin = (*offsets)[0].get<uint64_t>();
  e.end = (*offsets)[1].get<uint64_t>();
  return e;
}

Header read_header(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw Error("precprobe: cannot stat " + path + ": " + std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) bad_file(path, "shorter than its 8-byte header length");
  unsigned char len[8];
  read_at(fd, len, 8, 0, path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxHeader)
    bad_file(path, "a header of " + std::to_string(n) + " bytes (at most 100 MB)");
  if (n > size - 8)
    bad_file(path, "the header length " + std::to_string(n) + " passes the end of the file");
  std::string text(static_cast<size_t>(n), '\0');
  read_at(fd, text.data(), text.size(), 8, path);
  if (text.empty() || text[0] != '{') bad_file(path, "the header does not start with '{'");
  nlohmann::ordered_json j;
  std::set<std::string> keys;
  std::string repeated;
  // The format disallows a name given twice, which a JSON parser would silently merge.
  auto top_keys = [&](int depth, nlohmann::ordered_json::parse_event_t event,
                      nlohmann::ordered_json& parsed) {
    if (depth == 1 && event == nlohmann::ordered_json::parse_event_t::key && parsed.is_string() &&
        !keys.insert(parsed.get<std::string>()).second && repeated.empty())
      repeated = parsed.get<std::string>();
    return true;
  };
  try {
    j = nlohmann::ordered_json::parse(text, top_keys);
  } catch (const nlohmann::json::exception& e) {
    bad_file(path, std::string("the header is not JSON (") + e.what() + ")");
  }
  if (!repeated.empty()) bad_file(path, quote_name(repeated) + " is given twice");
  if (!j.is_object()) bad_file(path, "the header is not a JSON object");
  Header h;
  h.data_start = 8 + n;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == kMetadataKey) {
      if (!it.value().is_object()) bad_file(path, "\"__metadata__\" is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string())
          bad_file(path, "\"__metadata__\"'s " + quote_name(m.key()) + " is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    h.entries.push_back(parse_entry(it.key(), it.value(), path));
  }
  std::vector<const Entry*> by_offset;
  for (const Entry& e : h.entries) by_offset.push_back(&e);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return std::make_pair(a->begin, a->end) < std::make_pair(b->begin, b->end);
  });
  uint64_t at = 0;
  for (const Entry* e : by_offset) {
    if (e->begin != at || e->end < e->begin)
      bad_file(path, quote_name(e->name) + ": data_offsets [" + std::to_string(e->begin) + "," +
                         std::to_string(e->end) +
                         "] leave a hole or overlap (expected to begin at " + std::to_string(at) +
                         ")");
    if (e->end - e->begin != checked_bytes(*e, path))
      bad_file(path, quote_name(e->name) + ": data_offsets hold " +
                         std::to_string(e->end - e->begin) + " bytes, its dtype and shape need " +
                         std::to_string(checked_bytes(*e, path)));
    at = e->end;
  }
  if (h.data_start + at != size)
    bad_file(path, "the tensors end at byte " + std::to_string(h.data_start + at) +
                       ", the file at byte " + std::to_string(size));
  return h;
}

at::Tensor read_entry(int fd, const Header& h, const Entry& e, const std::string& path) {
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
  if (e.end > e.begin) read_at(fd, t.data_ptr(), e.end - e.begin, h.data_start + e.begin, path);
  return t;
}

Fd open_for_reading(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0)
    throw Error("precprobe: cannot open state file " + path + ": " + std::strerror(errno));
  return fd;
}

}  // namespace

NamedTensors state_tensors(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& p : module.named_parameters(/*recurse=*/true))
    if (p.value().defined()) out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true))
    if (b.value().defined()) out.emplace_back(b.key(), b.value());
  return out;
}

void save_state(const NamedTensors& tensors, const std::string& path,
                const std::map<std::string, std::string>& metadata) {
  require_little_endian();
  Quiet quiet;
  std::set<std::string> seen;
  struct Item {
    const std::string* name;
    at::Tensor cpu;
    size_t order;
  };
  std::vector<Item> items;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    if (name.empty() || name == kMetadataKey)
      throw Error("precprobe: save_state: tensor " + std::to_string(i) + " has the name '" + name +
                  "', which the format reserves or cannot hold");
    if (!seen.insert(name).second)
      throw Error("precprobe: save_state: " + quote_name(name) + " is given twice");
    if (!t.defined())
      throw Error("precprobe: save_state: " + quote_name(name) + " is an undefined tensor");
    if (dtype_name(t.scalar_type()) == nullptr)
      throw Error("precprobe: save_state: " + quote_name(name) + " is " +
                  std::string(c10::toString(t.scalar_type())) +
                  ", a dtype the state file (safetensors) has no name for");
    if (t.layout() != at::kStrided)
      throw Error("precprobe: save_state: " + quote_name(name) +
                  " is not a strided (dense) tensor");
    try {
      items.push_back({&name, t.detach().to(at::kCPU).contiguous(), i});
    } catch (const c10::Error& e) {
      throw Error("precprobe: save_state: reading " + quote_name(name) + ": " +
                  e.what_without_backtrace());
    }
  }
  // Data by decreasing element size (each tensor aligned for a reader that maps the file),
  // the header in the order given.
  std::vector<const Item*> data_order;
  for (const Item& it : items) data_order.push_back(&it);
  std::stable_sort(data_order.begin(), data_order.end(), [](const Item* a, const Item* b) {
    return a->cpu.element_size() > b->cpu.element_size();
  });
  std::vector<std::pair<uint64_t, uint64_t>> offsets(items.size());
  uint64_t at = 0;
  for (const Item* it : data_order) {
    const uint64_t n = static_cast<uint64_t>(it->cpu.numel()) * it->cpu.element_size();
    offsets[it->order] = {at, at + n};
    at += n;
  }
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  meta["format"] = "pt";
  meta["producer"] = "precprobe";
  for (const auto& [k, v] : metadata) meta[k] = v;
  header[kMetadataKey] = meta;
  for (const Item& it : items) {
    nlohmann::ordered_json e;
    e["dtype"] = dtype_name(it.cpu.scalar_type());
    e["shape"] = it.cpu.sizes().vec();
    e["data_offsets"] = {offsets[it.order].first, offsets[it.order].second};
    header[*it.name] = std::move(e);
  }
  std::string text;
  try {
    text = header.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::strict);
  } catch (const nlohmann::json::exception& e) {
    throw Error("precprobe: save_state: a name or metadata value is not UTF-8 (" +
                std::string(e.what()) + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));

  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0)
    throw Error("precprobe: save_state: cannot create " + tmp + ": " + std::strerror(errno));
  try {
    write_all(fd.get(), len, 8, tmp);
    write_all(fd.get(), text.data(), text.size(), tmp);
    for (const Item* it : data_order)
      write_all(fd.get(), it->cpu.data_ptr(), it->cpu.numel() * it->cpu.element_size(), tmp);
    if (::close(fd.release()) != 0)
      throw Error("precprobe: save_state: cannot write " + tmp + ": " + std::strerror(errno));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error("precprobe: save_state: cannot rename " + tmp + " to " + path + ": " +
                  std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

void save_state(const torch::nn::Module& module, const std::string& path,
                const std::map<std::string, std::string>& metadata) {
  save_state(state_tensors(module), path, metadata);
}

LoadResult load_state(const NamedTensors& tensors, const std::string& path, bool strict) {
  require_little_endian();
  Fd fd = open_for_reading(path);
  const Header h = read_header(fd.get(), path);
  std::map<std::string, const Entry*> in_file;
  for (const Entry& e : h.entries) in_file[e.name] = &e;
  std::vector<std::string> problems;
  std::set<std::string> wanted;
  LoadResult result;
  for (const auto& [name, t] : tensors) {
    wanted.insert(name);
    auto it = in_file.find(name);
    if (!t.defined()) {
      problems.push_back(quote_name(name) + ": the module's tensor is undefined");
      continue;
    }
    if (it == in_file.end()) {
      if (strict)
        problems.push_back(quote_name(name) + " is missing from the file");
      else
        result.missing_keys.push_back(name);
      continue;
    }
    const Entry& e = *it->second;
    if (e.shape != t.sizes().vec())
      problems.push_back(quote_name(name) + ": shape " + shape_text(e.shape) + " in the file vs " +
                         shape_text(t.sizes()) + " in the module");
    if (e.dtype != t.scalar_type()) {
      const char* mine = dtype_name(t.scalar_type());
      problems.push_back(quote_name(name) + ": dtype " + e.dtype_text + " in the file vs " +
                         (mine ? std::string(mine) : std::string(c10::toString(t.scalar_type()))) +
                         " in the module");
    }
  }
  for (const Entry& e : h.entries) {
    if (wanted.count(e.name)) continue;
    if (strict)
      problems.push_back(quote_name(e.name) + " is in the file but not in the module");
    else
      result.unexpected_keys.push_back(e.name);
  }
  if (!problems.empty()) {
    std::string msg = "precprobe: load_state: " + path + " does not match the module (" +
                      std::to_string(problems.size()) +
                      (problems.size() == 1 ? " difference" : " differences") + "): ";
    constexpr size_t kShown = 20;
    for (size_t i = 0; i < problems.size() && i < kShown; ++i) msg += (i ? "; " : "") + problems[i];
    if (problems.size() > kShown)
      msg += "; and " + std::to_string(problems.size() - kShown) + " more";
    throw Error(msg);
  }
  Quiet quiet;
  // All read first: a read error leaves the module as it was.
  std::vector<at::Tensor> values;
  values.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    auto it = in_file.find(name);
    values.push_back(it == in_file.end() ? at::Tensor()
                                         : read_entry(fd.get(), h, *it->second, path));
  }
  try {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (values[i].defined()) tensors[i].second.copy_(values[i]);
  } catch (const c10::Error& e) {
    throw Error("precprobe: load_state: copying into the module's tensors: " +
                std::string(e.what_without_backtrace()));
  }
  return result;
}

LoadResult load_state(torch::nn::Module& module, const std::string& path, bool strict) {
  return load_state(state_tensors(module), path, strict);
}

NamedTensors read_state(const std::string& path, std::map<std::string, std::string>* metadata) {
  require_little_endian();
  Fd fd = open_for_reading(path);
  const Header h = read_header(fd.get(), path);
  Quiet quiet;
  NamedTensors out;
  for (const Entry& e : h.entries) out.emplace_back(e.name, read_entry(fd.get(), h, e, path));
  if (metadata) *metadata = h.metadata;
  return out;
}

}  // namespace precprobe
