// LibTorch port of the `lm` pair (tests/ports/README.md): a character-level LSTM language
// model on a small text (tests/ports/data/lm.txt), the corpus batchified into columns and read
// in windows of 20 characters, the hidden state carried from window to window (detached),
// gradients clipped with torch::nn::utils::clip_grad_norm_; SGD.
//
//   port_lm --data FILE [--steps 20] [--seed 1234] [--threads 1] [--dump DIR]
//           [--config FILE] [--load-state FILE] [--save-state FILE] [--lr 20]
//           planted bug: [--clip-norm X]
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "port_flags.h"

namespace {

constexpr int64_t kBatchSize = 8;
constexpr int64_t kBptt = 20;
constexpr int64_t kEmbedding = 32;
constexpr int64_t kHidden = 64;

using State = std::tuple<torch::Tensor, torch::Tensor>;

// The text's characters as token ids, numbered in order of first appearance.
struct Corpus {
  explicit Corpus(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read the corpus " + path + " (--data FILE)");
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::vector<int64_t> ids;
    ids.reserve(text.size());
    for (char c : text) {
      auto it = vocab.find(c);
      if (it == vocab.end()) it = vocab.emplace(c, static_cast<int64_t>(vocab.size())).first;
      ids.push_back(it->second);
    }
    train = torch::tensor(ids, torch::kLong);
  }
  std::map<char, int64_t> vocab;
  torch::Tensor train;
};

struct LanguageModelImpl : torch::nn::Module {
  explicit LanguageModelImpl(int64_t vocab_size)
      : encoder(register_module("encoder", torch::nn::Embedding(vocab_size, kEmbedding))),
        lstm(register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(kEmbedding, kHidden)))),
        decoder(register_module("decoder", torch::nn::Linear(kHidden, vocab_size))) {}

  // [bptt, batch] token ids -> [bptt * batch, vocab] logits, and the LSTM's state.
  std::tuple<torch::Tensor, State> forward(const torch::Tensor& input, const State& state) {
    auto [output, next] = lstm->forward(encoder->forward(input), state);
    auto logits = decoder->forward(output);
    return {logits.reshape({-1, logits.size(-1)}), next};
  }

  torch::nn::Embedding encoder;
  torch::nn::LSTM lstm;
  torch::nn::Linear decoder;
};
TORCH_MODULE(LanguageModel);

// [len] -> [len / batch, batch]: the text cut into `batch` columns, read top to bottom.
torch::Tensor batchify(const torch::Tensor& data, int64_t batch) {
  const int64_t rows = data.size(0) / batch;
  return data.narrow(0, 0, rows * batch).view({batch, rows}).t().contiguous();
}

}  // namespace

int main(int argc, char** argv) try {
  const auto flags = ports::parse_flags(argc, argv, /*default_lr=*/20.0, {{"--clip-norm", 0.5}});
  torch::set_num_threads(flags.threads);
  precprobe::seed_all(flags.seed, /*deterministic=*/true);

  Corpus corpus(flags.data);
  const torch::Tensor train_data = batchify(corpus.train, kBatchSize);

  LanguageModel model(static_cast<int64_t>(corpus.vocab.size()));
  if (!flags.load_state.empty()) precprobe::load_state(model, flags.load_state);
  if (!flags.save_state.empty()) precprobe::save_state(model, flags.save_state);
  torch::manual_seed(flags.seed);

  torch::nn::CrossEntropyLoss criterion;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(flags.lr));

  std::unique_ptr<precprobe::PrecisionDebugger> dbg;
  if (flags.debugger()) {
    precprobe::DebuggerOptions opts;
    if (!flags.config.empty()) opts = precprobe::DebuggerOptions::from_json_file(flags.config);
    if (!flags.dump.empty()) {
      opts.dump_path = flags.dump;
      opts.overwrite = true;
    }
    dbg = std::make_unique<precprobe::PrecisionDebugger>(opts);
    dbg->start(model);
  }

  model->train();
  State state{torch::zeros({1, kBatchSize, kHidden}), torch::zeros({1, kBatchSize, kHidden})};
  int64_t step = 0;
  for (int64_t i = 0; i + 1 < train_data.size(0) && step < flags.steps; i += kBptt, ++step) {
    const int64_t len = std::min(kBptt, train_data.size(0) - 1 - i);
    auto input = train_data.narrow(0, i, len);
    auto target = train_data.narrow(0, i + 1, len).reshape({-1});
    // Truncated backpropagation through time: the state goes on, its history does not.
    state = {std::get<0>(state).detach(), std::get<1>(state).detach()};

    optimizer.zero_grad();
    auto [logits, next] = model->forward(input, state);
    state = next;
    auto loss = criterion(logits, target);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), flags.value("--clip-norm"));
    optimizer.step();

    if (dbg) dbg->step();
    std::printf("step %lld loss %.7g\n", static_cast<long long>(step), loss.item<float>());
    std::fflush(stdout);
  }
  if (dbg) dbg->stop();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "port_lm: %s\n", e.what());
  return 1;
}
