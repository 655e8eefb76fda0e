// Data-parallel training on c10d Gloo: N processes, each on its shard of every batch,
// gradients all-reduced each step; precprobe writes one dump stream per rank, the
// GradScaler skips the same steps on every rank, and check_replicas() catches silent desync.
//
// Launch (as torchrun would): scripts/launch_ddp.sh 2 --steps 100 --dump ddp_dump
//   env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   ddp_fashion_mnist [--steps 100] [--batch-size 64] [--lr 1e-3] [--dump DIR]
//                     [--check-every 50] [--plant-inf-step S] [--plant-inf-rank R]
//                     [--perturb-rank R] [--kill-step S] [--kill-rank R] [--no-debugger]
#include <precprobe/distributed.h>
#include <precprobe/precprobe.h>
#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "fashion_mnist.h"

namespace {

struct Flags {
  int64_t steps = 100;
  int64_t batch_size = 64;
  double lr = 1e-3;
  std::string dump = "ddp_dump";
  int64_t check_every = 50;
  int64_t plant_inf_step = -1;  // plant an inf in one gradient at this step...
  int plant_inf_rank = 1;       // ...on this rank
  int perturb_rank = -1;        // perturb one parameter on this rank before training
  int64_t kill_step = -1;       // SIGKILL this process after this step...
  int kill_rank = 1;            // ...on this rank (a rank that dies)
  bool debugger = true;
  int timeout_s = 60;  // for the store and the group's collectives
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--steps")
      f.steps = std::stoll(next());
    else if (a == "--batch-size")
      f.batch_size = std::stoll(next());
    else if (a == "--lr")
      f.lr = std::stod(next());
    else if (a == "--dump")
      f.dump = next();
    else if (a == "--check-every")
      f.check_every = std::stoll(next());
    else if (a == "--plant-inf-step")
      f.plant_inf_step = std::stoll(next());
    else if (a == "--plant-inf-rank")
      f.plant_inf_rank = std::stoi(next());
    else if (a == "--perturb-rank")
      f.perturb_rank = std::stoi(next());
    else if (a == "--kill-step")
      f.kill_step = std::stoll(next());
    else if (a == "--kill-rank")
      f.kill_rank = std::stoi(next());
    else if (a == "--no-debugger")
      f.debugger = false;
    else if (a == "--timeout")
      f.timeout_s = std::stoi(next());
    else
      throw std::runtime_error("unknown flag " + a);
  }
  return f;
}

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Mlp);

// One all-reduce over all gradients flattened into one buffer (Gloo's allreduce takes a
// list of same-shaped tensors, one per device, not a list of different tensors).
void allreduce_mean(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, torch::nn::Module& m) {
  std::vector<at::Tensor> grads;
  for (auto& p : m.parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return;
  std::vector<at::Tensor> pieces;
  for (auto& g : grads) pieces.push_back(g.reshape({-1}));
  std::vector<at::Tensor> flat{torch::cat(pieces)};
  pg->allreduce(flat)->wait();
  flat[0].div_(pg->getSize());
  int64_t offset = 0;
  for (auto& g : grads) {
    g.copy_(flat[0].slice(0, offset, offset + g.numel()).view_as(g));
    offset += g.numel();
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const Flags flags = parse_flags(argc, argv);
  at::set_num_threads(1);
  auto pg = precprobe::make_gloo_process_group_from_env(flags.timeout_s);
  const int rank = pg->getRank();
  const int world = pg->getSize();

  precprobe::seed_all(1234, /*deterministic=*/true);  // same initial weights on every rank
  Mlp net;
  if (flags.perturb_rank == rank) {
    torch::NoGradGuard ng;
    net->fc2->bias[3].add_(1e-3);
  }
  auto report = precprobe::check_replicas(*net, pg);
  if (rank == 0) std::printf("before training: %s\n", report.summary().c_str());

  auto train = fashion_mnist::load("train");
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(flags.lr).momentum(0.9));
  precprobe::GradScalerOptions so;
  so.init_scale = 1024.0;
  precprobe::GradScaler scaler(so);
  scaler.set_process_group(pg);

  precprobe::DebuggerOptions dopts;
  dopts.dump_path = flags.dump;
  dopts.overwrite = true;
  std::unique_ptr<precprobe::PrecisionDebugger> dbg;
  if (flags.debugger) {
    // Rank and world size from the process group; the debugger runs check_replicas()
    // every --check-every steps and records the result in each rank's dump.
    dopts.replica_check_every = flags.check_every;
    dbg = std::make_unique<precprobe::PrecisionDebugger>(dopts, pg);
    dbg->start(net);
  }

  const int64_t shard = flags.batch_size / world;
  for (int64_t step = 0; step < flags.steps; ++step) {
    // Every rank draws the same batch indices and takes its own shard of them.
    const int64_t begin = (step * flags.batch_size) % (train.images.size(0) - flags.batch_size);
    auto x = train.images.slice(0, begin + rank * shard, begin + (rank + 1) * shard);
    auto y = train.labels.slice(0, begin + rank * shard, begin + (rank + 1) * shard);
    auto loss = torch::cross_entropy_loss(net->forward(x), y);
    opt.zero_grad();
    scaler.scale(loss).backward();
    allreduce_mean(pg, *net);
    // Planted after the all-reduce, on one rank only: only the scaler's own all-reduce of
    // found_inf can make the other ranks skip this step too.
    if (step == flags.plant_inf_step && rank == flags.plant_inf_rank) {
      net->fc1->weight.grad()[0][0] = std::numeric_limits<float>::infinity();
    }
    const bool stepped = scaler.step(opt);
    scaler.update();

    // The mean loss over ranks, so every rank prints the same number.
    auto l = loss.detach().clone();
    std::vector<at::Tensor> lv{l};
    pg->allreduce(lv)->wait();
    const double mean_loss = l.item<double>() / world;
    if (dbg) {
      dbg->log_scalar("loss", mean_loss);
      dbg->step();
    }
    if (step == flags.kill_step && rank == flags.kill_rank) {
      std::printf("rank %d step %lld: killing myself (--kill-step)\n", rank,
                  static_cast<long long>(step));
      std::fflush(stdout);
      // A second later, as a rank that hangs and is then killed: the step's frames have
      // had time to reach the disk (step() flushes asynchronously).
      std::this_thread::sleep_for(std::chrono::seconds(1));
      ::raise(SIGKILL);
    }
    if (step % 20 == 0 || !stepped) {
      std::printf("rank %d step %3lld loss %.6f scale %.0f%s\n", rank, static_cast<long long>(step),
                  mean_loss, scaler.get_scale(), stepped ? "" : " (skipped)");
      std::fflush(stdout);
    }
    if (!dbg && flags.check_every > 0 && (step + 1) % flags.check_every == 0) {
      auto r = precprobe::check_replicas(*net, pg);
      if (rank == 0)
        std::printf("step %lld: %s\n", static_cast<long long>(step), r.summary().c_str());
    }
  }
  if (dbg) dbg->stop();
  report = precprobe::check_replicas(*net, pg);
  std::printf("rank %d done: %s\n", rank, report.summary().c_str());
  return report.consistent() ? 0 : 3;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ddp_fashion_mnist: %s\n", e.what());
  return 1;
}
