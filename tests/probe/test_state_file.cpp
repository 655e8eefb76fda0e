// save_state / load_state / read_state: the bytes of the file against the safetensors rules
// (read back here byte by byte, not through the reader under test), round trips of every
// dtype, the errors that name a mismatch, and the files the reader refuses.
#include <torch/torch.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "precprobe/error.h"
#include "precprobe/state.h"
#include "precprobe_catch.h"

namespace {

std::string temp_path(const std::string& name) {
  return "/tmp/precprobe_test_state_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<unsigned char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// A file made by hand: header text and data bytes.
std::vector<unsigned char> make_file(const std::string& header,
                                     const std::vector<unsigned char>& data) {
  std::vector<unsigned char> b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(uint64_t{header.size()} >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const precprobe::Error& e) {
    return e.what();
  }
  return "";
}

struct Net : torch::nn::Module {
  Net() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
    seq = register_module("seq", torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::ReLU(),
                                                       torch::nn::Linear(3, 2)));
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Sequential seq{nullptr};
};
// The same network behind a TORCH_MODULE holder, as LibTorch programs write it.
struct StateNetImpl : Net {};
TORCH_MODULE(StateNet);

}  // namespace

TEST_CASE("the file follows the safetensors layout byte for byte", "[state]") {
  const std::string path = temp_path("layout.safetensors");
  auto w = torch::tensor({1.0f, -2.5f, 3.0f, 0.0f, 5.0f, 6.0f}).reshape({2, 3});
  auto d = torch::tensor({0.5, -0.25}, torch::kFloat64);
  auto h = torch::tensor({1.0f, 2.0f, 3.0f}).to(torch::kHalf);
  auto n = torch::tensor(7, torch::kLong);  // 0-d, as BatchNorm's num_batches_tracked
  // A non-contiguous view is written in C order.
  auto t = torch::arange(6, torch::kInt32).reshape({2, 3}).t();
  precprobe::save_state({{"w", w}, {"d", d}, {"h", h}, {"n", n}, {"t", t}}, path,
                        {{"note", "hello"}});
  const auto b = file_bytes(path);
  REQUIRE(b.size() > 8);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | b[static_cast<size_t>(i)];
  CHECK(len % 8 == 0);
  REQUIRE(8 + len <= b.size());
  const std::string text(b.begin() + 8, b.begin() + 8 + static_cast<int64_t>(len));
  CHECK(text[0] == '{');
  auto j = nlohmann::ordered_json::parse(text);
  // Header keys in the order given, metadata first.
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  CHECK(keys == std::vector<std::string>{"__metadata__", "w", "d", "h", "n", "t"});
  CHECK(j["__metadata__"]["format"] == "pt");
  CHECK(j["__metadata__"]["note"] == "hello");
  CHECK(j["w"]["dtype"] == "F32");
  CHECK(j["w"]["shape"] == nlohmann::ordered_json::array({2, 3}));
  CHECK(j["d"]["dtype"] == "F64");
  CHECK(j["h"]["dtype"] == "F16");
  CHECK(j["n"]["dtype"] == "I64");
  CHECK(j["n"]["shape"] == nlohmann::ordered_json::array());
  CHECK(j["t"]["dtype"] == "I32");
  CHECK(j["t"]["shape"] == nlohmann::ordered_json::array({3, 2}));
  // Offsets: contiguous from 0, every tensor aligned to its element size, the file ends at
  // the last one.
  struct Span {
    uint64_t b, e;
    size_t size;
    std::string name;
  };
  std::vector<Span> spans;
  for (const char* k : {"w", "d", "h", "n", "t"}) {
    const auto& o = j[k]["data_offsets"];
    spans.push_back({o[0].get<uint64_t>(), o[1].get<uint64_t>(),
                     static_cast<size_t>(j[k]["dtype"] == "F64" || j[k]["dtype"] == "I64" ? 8
                                         : j[k]["dtype"] == "F16"                         ? 2
                                                                                          : 4),
                     k});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& x) { return a.b < x.b; });
  uint64_t at = 0;
  for (const Span& s : spans) {
    CHECK(s.b == at);
    CHECK((8 + len + s.b) % s.size == 0);
    at = s.e;
  }
  CHECK(8 + len + at == b.size());
  auto bytes_of = [&](const char* k) {
    const auto& o = j[k]["data_offsets"];
    return std::vector<unsigned char>(
        b.begin() + 8 + static_cast<int64_t>(len) + o[0].get<int64_t>(),
        b.begin() + 8 + static_cast<int64_t>(len) + o[1].get<int64_t>());
  };
  // Little-endian IEEE bytes: -2.5f is 0xC0200000.
  auto wb = bytes_of("w");
  REQUIRE(wb.size() == 24);
  CHECK(std::vector<unsigned char>(wb.begin() + 4, wb.begin() + 8) ==
        std::vector<unsigned char>{0x00, 0x00, 0x20, 0xC0});
  auto nb = bytes_of("n");
  CHECK(nb == std::vector<unsigned char>{7, 0, 0, 0, 0, 0, 0, 0});
  // The transposed int32 view: C order of t = [[0,3],[1,4],[2,5]].
  auto tb = bytes_of("t");
  REQUIRE(tb.size() == 24);
  std::vector<int32_t> tv(6);
  std::memcpy(tv.data(), tb.data(), 24);
  CHECK(tv == std::vector<int32_t>{0, 3, 1, 4, 2, 5});
  ::unlink(path.c_str());
}

TEST_CASE("every dtype the format names survives a round trip bit for bit", "[state]") {
  const std::string path = temp_path("dtypes.safetensors");
  auto base = torch::tensor({0.0, -0.0, 1.5, -3.25, 1e-3, 65504.0, 100.0, -7.0});
  precprobe::NamedTensors in;
  for (auto t : {torch::kBool, torch::kUInt8, torch::kInt8, torch::kInt16, torch::kHalf,
                 torch::kBFloat16, torch::kInt32, torch::kFloat32, torch::kFloat64, torch::kInt64})
    in.emplace_back(std::string("t_") + c10::toString(t), base.to(t));
  in.emplace_back("nonfinite", torch::tensor({std::nan(""), std::numeric_limits<double>::infinity(),
                                              -std::numeric_limits<double>::infinity()}));
  in.emplace_back("empty", torch::empty({0, 3}));
  precprobe::save_state(in, path);
  std::map<std::string, std::string> meta;
  auto out = precprobe::read_state(path, &meta);
  CHECK(meta.at("producer") == "precprobe");
  REQUIRE(out.size() == in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    INFO(in[i].first);
    CHECK(out[i].first == in[i].first);
    CHECK(out[i].second.scalar_type() == in[i].second.scalar_type());
    CHECK(out[i].second.sizes() == in[i].second.sizes());
    CHECK(std::memcmp(out[i].second.data_ptr(), in[i].second.contiguous().data_ptr(),
                      in[i].second.nbytes()) == 0);
  }
  ::unlink(path.c_str());
}

TEST_CASE("a module's parameters and buffers by name, loaded into a second module", "[state]") {
  const std::string path = temp_path("module.safetensors");
  torch::manual_seed(1);
  auto a = std::make_shared<Net>();
  torch::manual_seed(2);
  auto b = std::make_shared<Net>();
  {
    torch::NoGradGuard g;
    a->bn->running_mean.normal_();
    a->bn->num_batches_tracked.fill_(11);
  }
  auto names = precprobe::state_tensors(*a);
  std::vector<std::string> got;
  for (auto& [n, t] : names) got.push_back(n);
  CHECK(got == std::vector<std::string>{"conv.weight", "conv.bias", "bn.weight", "bn.bias",
                                        "seq.0.weight", "seq.0.bias", "seq.2.weight", "seq.2.bias",
                                        "bn.running_mean", "bn.running_var",
                                        "bn.num_batches_tracked"});
  precprobe::save_state(*a, path);
  CHECK_FALSE(torch::equal(a->conv->weight, b->conv->weight));
  precprobe::load_state(*b, path);
  for (size_t i = 0; i < names.size(); ++i) {
    INFO(names[i].first);
    CHECK(torch::equal(names[i].second, precprobe::state_tensors(*b)[i].second));
  }
  CHECK(b->bn->num_batches_tracked.item<int64_t>() == 11);
  CHECK(b->conv->weight.requires_grad());
  // What start() takes, save_state and load_state take: the TORCH_MODULE holder itself and
  // a shared_ptr to the module, besides the module.
  torch::manual_seed(3);
  StateNet c;
  torch::manual_seed(4);
  StateNet d;
  precprobe::save_state(c, path);  // the holder
  precprobe::load_state(d, path);
  CHECK(torch::equal(d->conv->weight, c->conv->weight));
  precprobe::load_state(a, path);  // a shared_ptr
  CHECK(torch::equal(a->seq->parameters()[0], c->seq->parameters()[0]));
  precprobe::save_state(b, path);
  CHECK(torch::equal(precprobe::read_state(path)[0].second, b->conv->weight));
  ::unlink(path.c_str());
}

TEST_CASE("a mismatch names every name, shape and dtype, and nothing is loaded", "[state]") {
  const std::string path = temp_path("mismatch.safetensors");
  precprobe::save_state({{"a", torch::zeros({2, 3})},
                         {"b", torch::zeros({4})},
                         {"c", torch::zeros({2}, torch::kFloat64)},
                         {"extra", torch::zeros({1})}},
                        path);
  auto a = torch::ones({3, 2});
  auto b = torch::ones({4});
  auto c = torch::ones({2});
  auto gone = torch::ones({1});
  const std::string msg = error_of([&] {
    precprobe::load_state({{"a", a}, {"b", b}, {"c", c}, {"gone", gone}}, path);
  });
  CHECK_THAT(msg, Catch::Matchers::ContainsSubstring(path));
  CHECK_THAT(msg, Catch::Matchers::ContainsSubstring("4 differences"));
  CHECK_THAT(msg, Catch::Matchers::ContainsSubstring(
                      "'a': shape [2,3] in the file vs [3,2] in the module"));
  CHECK_THAT(msg,
             Catch::Matchers::ContainsSubstring("'c': dtype F64 in the file vs F32 in the module"));
  CHECK_THAT(msg, Catch::Matchers::ContainsSubstring("'gone' is missing from the file"));
  CHECK_THAT(msg,
             Catch::Matchers::ContainsSubstring("'extra' is in the file but not in the module"));
  CHECK(torch::equal(b, torch::ones({4})));  // a matching tensor is not written either
  ::unlink(path.c_str());
}

TEST_CASE("strict false loads what both have and returns the names on one side only", "[state]") {
  // A port without the original's bias (Python's load_state_dict(strict=False)).
  const std::string path = temp_path("nonstrict.safetensors");
  precprobe::save_state({{"w", torch::full({2}, 3.0)}, {"bias", torch::full({2}, 5.0)}}, path);
  auto w = torch::ones({2});
  auto extra = torch::ones({1});
  const auto r = precprobe::load_state({{"w", w}, {"extra", extra}}, path, /*strict=*/false);
  CHECK(torch::equal(w, torch::full({2}, 3.0)));
  CHECK(torch::equal(extra, torch::ones({1})));  // missing from the file: left as it was
  CHECK(r.missing_keys == std::vector<std::string>{"extra"});
  CHECK(r.unexpected_keys == std::vector<std::string>{"bias"});
  // A shape that differs is still an error, and nothing is written.
  auto w3 = torch::ones({3});
  CHECK_THAT(error_of([&] {
               precprobe::load_state({{"w", w3}}, path, /*strict=*/false);
             }),
             Catch::Matchers::ContainsSubstring("'w': shape [2] in the file vs [3]"));
  CHECK(torch::equal(w3, torch::ones({3})));
  // Strict, the default, refuses the same file.
  CHECK_THAT(error_of([&] {
               precprobe::load_state({{"w", w}, {"extra", extra}}, path);
             }),
             Catch::Matchers::ContainsSubstring("'bias' is in the file but not in the module"));
  ::unlink(path.c_str());
}

TEST_CASE("save_state refuses what the format cannot hold", "[state]") {
  const std::string path = temp_path("refused.safetensors");
  CHECK_THAT(error_of([&] {
               precprobe::save_state({{"z", torch::zeros({2}, torch::kComplexFloat)}}, path);
             }),
             Catch::Matchers::ContainsSubstring("'z' is ComplexFloat"));
  CHECK_THAT(error_of([&] {
               precprobe::save_state({{"x", torch::zeros({1})}, {"x", torch::zeros({1})}}, path);
             }),
             Catch::Matchers::ContainsSubstring("'x' is given twice"));
  CHECK_THAT(error_of([&] {
               precprobe::save_state({{"__metadata__", torch::zeros({1})}}, path);
             }),
             Catch::Matchers::ContainsSubstring("reserves"));
  CHECK_THAT(error_of([&] {
               precprobe::save_state({{"x", torch::zeros({1})}}, "/nonexistent/dir/f");
             }),
             Catch::Matchers::ContainsSubstring("/nonexistent/dir/f"));
  CHECK(access(path.c_str(), F_OK) != 0);
}

TEST_CASE("the reader refuses files that break the format's rules", "[state]") {
  const std::string path = temp_path("bad.safetensors");
  const std::vector<unsigned char> four(4, 0);
  struct Case {
    std::string header;
    std::vector<unsigned char> data;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", four, ""},  // valid
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", {}, "the tensors end at byte"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", four, "need 8"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       std::vector<unsigned char>(8, 0), "leave a hole"},
      {R"({"a":{"dtype":"X9","shape":[1],"data_offsets":[0,4]}})", four, "dtype X9"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       four, "'a' is given twice"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       std::vector<unsigned char>(6, 0), "the tensors end at byte"},
      {R"(["a"])", {}, "does not start with '{'"},
      {R"({"a":)", {}, "not JSON"},
      {R"({"__metadata__":{"k":1}})", {}, "is not a string"},
  };
  for (const Case& c : cases) {
    INFO(c.header);
    write_bytes(path, make_file(c.header, c.data));
    const std::string msg = error_of([&] { precprobe::read_state(path); });
    if (c.expect.empty()) {
      CHECK(msg.empty());
    } else {
      CHECK_THAT(msg, Catch::Matchers::ContainsSubstring(c.expect));
      CHECK_THAT(msg, Catch::Matchers::ContainsSubstring(path));
    }
  }
  // A header length beyond the file, and a file shorter than 8 bytes.
  write_bytes(path, {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0});
  CHECK_THAT(error_of([&] { precprobe::read_state(path); }),
             Catch::Matchers::ContainsSubstring("100 MB"));
  write_bytes(path, {16, 0, 0, 0, 0, 0, 0, 0, '{', '}'});
  CHECK_THAT(error_of([&] { precprobe::read_state(path); }),
             Catch::Matchers::ContainsSubstring("passes the end"));
  write_bytes(path, {1, 2, 3});
  CHECK_THAT(error_of([&] { precprobe::read_state(path); }),
             Catch::Matchers::ContainsSubstring("shorter"));
  CHECK_THAT(error_of([&] { precprobe::read_state(path + ".absent"); }),
             Catch::Matchers::ContainsSubstring("cannot open"));
  ::unlink(path.c_str());
}
