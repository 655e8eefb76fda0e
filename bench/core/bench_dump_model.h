// A synthetic training run for the reading benchmarks: op records shaped like
// the ones the probe writes at level L2 for a residual MLP (linear, layer_norm, relu, a
// cross-entropy head), with the backward nodes, AccumulateGrad and the optimizer's updates,
// plus the gradient monitor's and the loss's lines. One step is ~54 records per block and
// ~40 for the head and the loss: 6 blocks give ~370 records a step, ~200 distinct
// (op, call, direction) names. Statistics are drawn per tensor and reused wherever the same
// tensor appears again (the probe's statistics cache does the same), so the stream
// compresses like a real one.
//
// `Variant` makes the second run of a compare: the same ops with statistics perturbed by a
// relative `noise` (rounding-level by default), and optionally an overflow at one step.
// Header-only, for bench/ programs and tests; not thread-safe (one RunModel per thread).
#pragma once

#include <precprobe/core.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace precprobe::bench {

struct Variant {
  uint64_t seed = 2024;
  double noise = 0;            ///< relative perturbation of min/max/mean/norm
  int64_t overflow_step = -1;  ///< at this step, one op's output turns +inf, then NaN
  /// With overflow_step: every later step is NaN from its first op on (a diverged run).
  bool diverge = false;
  int blocks = 6;  ///< residual blocks (each ~54 records per step)
  int64_t batch = 64, hidden = 256, classes = 10;
};

class RunModel {
 public:
  explicit RunModel(Variant v) : v_(v), rng_(v.seed), noise_rng_(v.seed ^ 0x5eed) {
    add_param("embed.weight", {v_.hidden, 784});
    add_param("embed.bias", {v_.hidden});
    for (int b = 0; b < v_.blocks; ++b) {
      const std::string p = "blocks." + std::to_string(b) + ".";
      add_param(p + "fc.weight", {v_.hidden, v_.hidden});
      add_param(p + "fc.bias", {v_.hidden});
      add_param(p + "norm.weight", {v_.hidden});
      add_param(p + "norm.bias", {v_.hidden});
    }
    add_param("head.weight", {v_.classes, v_.hidden});
    add_param("head.bias", {v_.classes});
  }

  /// The records of step `step`, in the order they finished.
  void step(int64_t step, std::vector<OpRecord>& ops, std::vector<GradRecord>& grads,
            std::vector<ScalarRecord>& scalars) {
    step_ = step;
    seq_ = 0;
    calls_.clear();
    out_ = &ops;
    bad_ = v_.overflow_step >= 0 && step >= v_.overflow_step;
    overflowed_ = v_.diverge && bad_ && step > v_.overflow_step;
    const int64_t B = v_.batch, H = v_.hidden;
    Tensor x = fresh("Float", {B, 784}, 1.0, false);
    Tensor labels = label_tensor();
    Tensor h = linear(x, "embed", {B, H});
    std::vector<Tensor> acts;
    for (int b = 0; b < v_.blocks; ++b) {
      const std::string p = "blocks." + std::to_string(b) + ".";
      Tensor n = layer_norm(h, p + "norm");
      Tensor f = linear(n, p + "fc", {B, H});
      if (bad_ && b == v_.blocks / 2 && step == v_.overflow_step) f = overflow(f);
      Tensor r = unary("aten::relu", "", f, "aten::clamp_min", {{"v", "0"}});
      h = binary("aten::add", "Tensor", h, r, "1");
      acts.push_back(h);
    }
    Tensor logits = linear(h, "head", {B, v_.classes});
    Tensor loss = cross_entropy(logits, labels);
    backward(loss, acts);
    optimizer();
    for (auto& [name, p] : params_) {
      GradRecord g;
      g.step = step;
      g.param = name;
      g.grad_norm = p.grad.stats.norm;
      g.grad_abs_max = p.grad.stats.abs_max();
      g.grad_abs_mean = std::fabs(p.grad.stats.mean);
      g.grad_nan = p.grad.stats.nan;
      g.grad_inf = p.grad.stats.pinf + p.grad.stats.ninf;
      g.weight_norm = p.value.stats.norm;
      g.update_ratio = 1e-3 * std::fabs(normal());
      grads.push_back(std::move(g));
    }
    ScalarRecord s;
    s.step = step;
    s.name = "loss";
    s.value = loss.stats.mean;
    scalars.push_back(std::move(s));
  }

 private:
  struct Tensor {
    TensorStats stats;
  };
  struct Param {
    Tensor value, grad;
  };

  double normal() { return std::normal_distribution<double>(0.0, 1.0)(rng_); }
  // What the perturbation of the second run does to one statistic.
  // (its own generator: the second run draws the same statistics as the first).
  double perturb(double v) {
    if (!(v_.noise > 0)) return v;
    return v * (1 + v_.noise * std::normal_distribution<double>(0.0, 1.0)(noise_rng_));
  }

  static double as_float(double v) { return static_cast<double>(static_cast<float>(v)); }

  static int64_t numel_of(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }

  // Statistics of a float32 tensor of values ~ N(mean, scale^2).
  Tensor fresh(const char* dtype, std::vector<int64_t> shape, double scale, bool rg) {
    Tensor t;
    TensorStats& s = t.stats;
    s.dtype = dtype;
    s.shape = std::move(shape);
    s.requires_grad = rg;
    s.numel = numel_of(s.shape);
    const double spread = std::sqrt(2 * std::log(std::max<double>(2, s.numel)));
    s.zero = rng_() % 8 == 0 ? static_cast<int64_t>(rng_() % (s.numel / 4 + 1)) : 0;
    s.neg = (s.numel - s.zero) / 2 + static_cast<int64_t>(rng_() % 7) - 3;
    if (s.neg < 0) s.neg = 0;
    if (s.neg > s.numel - s.zero) s.neg = s.numel - s.zero;
    s.pos = s.numel - s.zero - s.neg;
    s.min = perturb(as_float(-scale * spread * (0.8 + 0.4 * std::fabs(normal()))));
    s.max = perturb(as_float(scale * spread * (0.8 + 0.4 * std::fabs(normal()))));
    s.mean = perturb(scale * 0.05 * normal());
    s.norm = perturb(scale * std::sqrt(static_cast<double>(s.numel)) * (0.9 + 0.1 * normal()));
    s.min = as_float(s.min);
    s.max = as_float(s.max);
    if (bad_ && overflowed_) poison(s);
    return t;
  }
  static void poison(TensorStats& s) {
    s.nan = s.numel;
    s.pinf = s.ninf = s.zero = s.neg = s.pos = 0;
    s.min = s.max = s.mean = s.norm = std::nan("");
  }
  Tensor overflow(Tensor t) {
    t.stats.pinf = 1;
    t.stats.pos -= 1;
    overflowed_ = true;
    return t;
  }
  Tensor same(const Tensor& t, std::vector<int64_t> shape) {
    Tensor o = t;
    o.stats.shape = std::move(shape);
    o.stats.param.clear();
    o.stats.requires_grad = t.stats.requires_grad;
    return o;
  }

  void add_param(const std::string& name, std::vector<int64_t> shape) {
    Param p;
    p.value = fresh("Float", shape, 0.05, true);
    p.value.stats.param = name;
    p.grad = fresh("Float", std::move(shape), 1e-3, false);
    params_.emplace(name, std::move(p));
  }

  Tensor label_tensor() {
    Tensor t;
    TensorStats& s = t.stats;
    s.dtype = "Long";
    s.shape = {v_.batch};
    s.numel = v_.batch;
    int64_t left = v_.batch;
    for (int64_t c = 0; c < v_.classes; ++c) {
      const int64_t n = c + 1 == v_.classes ? left : std::min<int64_t>(left, rng_() % 12);
      left -= n;
      if (n > 0) s.hist.emplace_back(c, n);
    }
    s.zero = s.hist.empty() || s.hist[0].first != 0 ? 0 : s.hist[0].second;
    s.pos = s.numel - s.zero;
    s.min = s.hist.empty() ? 0 : static_cast<double>(s.hist.front().first);
    s.max = s.hist.empty() ? 0 : static_cast<double>(s.hist.back().first);
    s.mean = 4.5 + normal();
    s.norm = std::sqrt(static_cast<double>(s.numel)) * 5;
    return t;
  }

  static Arg targ(const Tensor& t) { return Arg{t.stats, {}}; }
  static Arg varg(std::string v) { return Arg{std::nullopt, std::move(v)}; }

  OpRecord& emit(const char* op, const char* ovl, int depth, Direction dir = Direction::kForward,
                 const std::string& node = "") {
    OpRecord r;
    r.step = step_;
    r.seq = seq_++;
    r.op = op;
    r.overload = ovl;
    r.dir = dir;
    r.call = calls_[{r.op, static_cast<int>(dir)}]++;
    r.depth = depth;
    r.seqnr = dir == Direction::kForward && depth == 0 ? sn_++ : -1;
    r.node = node;
    out_->push_back(std::move(r));
    return out_->back();
  }

  Tensor unary(const char* op, const char* ovl, const Tensor& in, const char* inner,
               std::vector<std::pair<const char*, std::string>> values) {
    Tensor out = fresh("Float", in.stats.shape, 1.0, in.stats.requires_grad);
    OpRecord& r = emit(op, ovl, 0);
    r.inputs.push_back(targ(in));
    r.outputs.push_back(targ(out));
    OpRecord& n = emit(inner, "", 1);
    n.inputs.push_back(targ(in));
    for (auto& [k, v] : values) n.inputs.push_back(varg(v));
    n.outputs.push_back(targ(out));
    return out;
  }

  Tensor binary(const char* op, const char* ovl, const Tensor& a, const Tensor& b,
                const char* alpha) {
    Tensor out = fresh("Float", a.stats.shape, 1.0, true);
    OpRecord& r = emit(op, ovl, 0);
    r.inputs = {targ(a), targ(b), varg(alpha)};
    r.outputs.push_back(targ(out));
    return out;
  }

  // aten::linear at L2: t (transpose, as_strided), addmm (expand, as_strided, copy_,
  // resolve_conj x2).
  Tensor linear(const Tensor& x, const std::string& prefix, std::vector<int64_t> out_shape) {
    const Tensor& w = params_.at(prefix + ".weight").value;
    const Tensor& b = params_.at(prefix + ".bias").value;
    const int64_t rows = w.stats.shape[0], cols = w.stats.shape[1];
    Tensor wt = same(w, {cols, rows});
    wt.stats.param = w.stats.param;
    Tensor out = fresh("Float", out_shape, 1.0, true);
    OpRecord& l = emit("aten::linear", "", 0);
    l.inputs = {targ(x), targ(w), targ(b)};
    l.outputs = {targ(out)};
    emit("aten::t", "", 1).inputs = {targ(w)};
    out_->back().outputs = {targ(wt)};
    OpRecord& tr = emit("aten::transpose", "int", 2);
    tr.inputs = {targ(w), varg("0"), varg("1")};
    tr.outputs = {targ(wt)};
    OpRecord& as = emit("aten::as_strided", "", 3);
    as.inputs = {targ(w), varg(shape_text({cols, rows})), varg(shape_text({1, cols})),
                 varg("null")};
    as.outputs = {targ(wt)};
    OpRecord& mm = emit("aten::addmm", "", 1);
    mm.inputs = {targ(b), targ(x), targ(wt), varg("1"), varg("1")};
    mm.outputs = {targ(out)};
    Tensor bx = same(b, out_shape);
    OpRecord& ex = emit("aten::expand", "", 2);
    ex.inputs = {targ(b), varg(shape_text(out_shape)), varg("false")};
    ex.outputs = {targ(bx)};
    OpRecord& as2 = emit("aten::as_strided", "", 3);
    as2.inputs = {targ(b), varg(shape_text(out_shape)), varg("[0,1]"), varg("null")};
    as2.outputs = {targ(bx)};
    OpRecord& cp = emit("aten::copy_", "", 2);
    cp.inputs = {targ(out), targ(bx), varg("false")};
    cp.outputs = {targ(out)};
    emit("aten::resolve_conj", "", 2).inputs = {targ(out)};
    out_->back().outputs = {targ(out)};
    emit("aten::resolve_conj", "", 2).inputs = {targ(x)};
    out_->back().outputs = {targ(x)};
    return out;
  }

  Tensor layer_norm(const Tensor& x, const std::string& prefix) {
    const Tensor& w = params_.at(prefix + ".weight").value;
    const Tensor& b = params_.at(prefix + ".bias").value;
    Tensor out = fresh("Float", x.stats.shape, 1.0, true);
    Tensor mean = fresh("Float", {x.stats.shape[0], 1}, 0.1, false);
    Tensor rstd = fresh("Float", {x.stats.shape[0], 1}, 1.0, false);
    OpRecord& l = emit("aten::layer_norm", "", 0);
    l.inputs = {targ(x),       varg("[" + std::to_string(v_.hidden) + "]"),
                targ(w),       targ(b),
                varg("1e-05"), varg("true")};
    l.outputs = {targ(out)};
    OpRecord& n = emit("aten::native_layer_norm", "", 1);
    n.inputs = {targ(x), varg("[" + std::to_string(v_.hidden) + "]"), targ(w), targ(b),
                varg("1e-05")};
    n.outputs = {targ(out), targ(mean), targ(rstd)};
    return out;
  }

  Tensor cross_entropy(const Tensor& logits, const Tensor& labels) {
    Tensor ls = fresh("Float", logits.stats.shape, 2.0, true);
    Tensor loss = fresh("Float", {}, 1.0, true);
    loss.stats.numel = 1;
    OpRecord& ce = emit("aten::cross_entropy_loss", "", 0);
    ce.inputs = {targ(logits), targ(labels), varg("null"), varg("1"), varg("-100"), varg("0.0")};
    ce.outputs = {targ(loss)};
    OpRecord& sm = emit("aten::log_softmax", "int", 1);
    sm.inputs = {targ(logits), varg("1"), varg("6")};
    sm.outputs = {targ(ls)};
    OpRecord& s2 = emit("aten::_log_softmax", "", 2);
    s2.inputs = {targ(logits), varg("1"), varg("false")};
    s2.outputs = {targ(ls)};
    OpRecord& nl = emit("aten::nll_loss_nd", "", 1);
    nl.inputs = {targ(ls), targ(labels), varg("null"), varg("1"), varg("-100")};
    nl.outputs = {targ(loss)};
    OpRecord& nf = emit("aten::nll_loss_forward", "", 2);
    nf.inputs = {targ(ls), targ(labels), varg("null"), varg("1"), varg("-100")};
    nf.outputs = {targ(loss), targ(loss)};
    return loss;
  }

  static std::string shape_text(const std::vector<int64_t>& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
    return t + "]";
  }

  // The grad of a linear's weight and bias (AddmmBackward0, TBackward0, AccumulateGrad).
  Tensor linear_backward(const Tensor& gout, const std::string& prefix) {
    Param& w = params_.at(prefix + ".weight");
    Param& b = params_.at(prefix + ".bias");
    const int64_t rows = w.value.stats.shape[0], cols = w.value.stats.shape[1];
    const Direction bw = Direction::kBackward;
    const std::string node = "AddmmBackward0";
    Tensor gin = fresh("Float", {v_.batch, cols}, 1e-2, false);
    emit("AddmmBackward0", "", 0, bw, node).inputs = {targ(gout)};
    Tensor wt = same(w.value, {rows, cols});
    wt.stats.param = w.value.stats.param;
    OpRecord& t = emit("aten::t", "", 0, bw, node);
    t.inputs = {targ(w.value)};
    t.outputs = {targ(wt)};
    OpRecord& mm = emit("aten::mm", "", 0, bw, node);
    mm.inputs = {targ(gout), targ(wt)};
    mm.outputs = {targ(gin)};
    emit("aten::resolve_conj", "", 1, bw, node).inputs = {targ(gin)};
    out_->back().outputs = {targ(gin)};
    Tensor gt = same(gout, {gout.stats.shape[1], v_.batch});
    OpRecord& t2 = emit("aten::t", "", 0, bw, node);
    t2.inputs = {targ(gout)};
    t2.outputs = {targ(gt)};
    w.grad = fresh("Float", {cols, rows}, 1e-3, false);
    OpRecord& mm2 = emit("aten::mm", "", 0, bw, node);
    mm2.inputs = {targ(gt), targ(gin)};
    mm2.outputs = {targ(w.grad)};
    b.grad = fresh("Float", {1, rows}, 1e-3, false);
    OpRecord& sum = emit("aten::sum", "dim_IntList", 0, bw, node);
    sum.inputs = {targ(gout), varg("[0]"), varg("true"), varg("null")};
    sum.outputs = {targ(b.grad)};
    OpRecord& fill = emit("aten::fill_", "Scalar", 1, bw, node);
    fill.inputs = {targ(b.grad), varg("0.0")};
    fill.outputs = {targ(b.grad)};
    b.grad.stats.shape = {rows};
    OpRecord& view = emit("aten::view", "", 0, bw, node);
    view.inputs = {targ(b.grad), varg("[" + std::to_string(rows) + "]")};
    view.outputs = {targ(b.grad)};
    accumulate(b.grad);
    const std::string tnode = "TBackward0";
    emit("TBackward0", "", 0, bw, tnode).inputs = {targ(w.grad)};
    w.grad.stats.shape = {rows, cols};
    OpRecord& t3 = emit("aten::t", "", 0, bw, tnode);
    t3.inputs = {targ(w.grad)};
    t3.outputs = {targ(w.grad)};
    accumulate(w.grad);
    return gin;
  }

  void accumulate(const Tensor& g) {
    const Direction bw = Direction::kBackward;
    const std::string node = "torch::autograd::AccumulateGrad";
    emit("torch::autograd::AccumulateGrad", "", 0, bw, node).inputs = {targ(g)};
    OpRecord& d = emit("aten::detach", "", 0, bw, node);
    d.inputs = {targ(g)};
    d.outputs = {targ(g)};
  }

  void backward(const Tensor& loss, const std::vector<Tensor>& acts) {
    const Direction bw = Direction::kBackward;
    Tensor one = fresh("Float", {}, 1.0, false);
    OpRecord& ol = emit("aten::ones_like", "", 0);
    ol.inputs = {targ(loss), varg("null"), varg("null"), varg("null"), varg("null"), varg("0")};
    ol.outputs = {targ(one)};
    Tensor glog = fresh("Float", {v_.batch, v_.classes}, 1e-2, false);
    emit("NllLossBackward0", "", 0, bw, "NllLossBackward0").inputs = {targ(one)};
    OpRecord& nb = emit("aten::nll_loss_backward", "", 0, bw, "NllLossBackward0");
    nb.inputs = {targ(one), targ(glog), varg("null"), varg("1"), varg("-100"), targ(loss)};
    nb.outputs = {targ(glog)};
    emit("LogSoftmaxBackward0", "", 0, bw, "LogSoftmaxBackward0").inputs = {targ(glog)};
    OpRecord& lb = emit("aten::_log_softmax_backward_data", "", 0, bw, "LogSoftmaxBackward0");
    lb.inputs = {targ(glog), targ(glog), varg("1"), varg("6")};
    lb.outputs = {targ(glog)};
    Tensor g = linear_backward(glog, "head");
    for (int b = v_.blocks - 1; b >= 0; --b) {
      const std::string p = "blocks." + std::to_string(b) + ".";
      emit("AddBackward0", "", 0, bw, "AddBackward0").inputs = {targ(g)};
      Tensor gr = fresh("Float", g.stats.shape, 1e-2, false);
      emit("ReluBackward0", "", 0, bw, "ReluBackward0").inputs = {targ(g)};
      OpRecord& th = emit("aten::threshold_backward", "", 0, bw, "ReluBackward0");
      th.inputs = {targ(g), targ(acts[static_cast<size_t>(b)]), varg("0")};
      th.outputs = {targ(gr)};
      Tensor gn = linear_backward(gr, p + "fc");
      Param& nw = params_.at(p + "norm.weight");
      Param& nb2 = params_.at(p + "norm.bias");
      nw.grad = fresh("Float", nw.value.stats.shape, 1e-3, false);
      nb2.grad = fresh("Float", nb2.value.stats.shape, 1e-3, false);
      Tensor gx = fresh("Float", g.stats.shape, 1e-2, false);
      emit("NativeLayerNormBackward0", "", 0, bw, "NativeLayerNormBackward0").inputs = {targ(gn)};
      OpRecord& lnb =
          emit("aten::native_layer_norm_backward", "", 0, bw, "NativeLayerNormBackward0");
      lnb.inputs = {targ(gn),        targ(acts[static_cast<size_t>(b)]),
                    varg("[256]"),   targ(nw.value),
                    targ(nb2.value), varg("[true,true,true]")};
      lnb.outputs = {targ(gx), targ(nw.grad), targ(nb2.grad)};
      accumulate(nw.grad);
      accumulate(nb2.grad);
      g = gx;
    }
    linear_backward(g, "embed");
  }

  // SGD with momentum, as the optimizer's ops record under NoGradGuard ("grad":false).
  void optimizer() {
    for (auto& [name, p] : params_) {
      Tensor buf = fresh("Float", p.value.stats.shape, 1e-3, false);
      OpRecord& m = emit("aten::mul_", "Tensor", 0);
      m.grad = false;
      m.inputs = {targ(buf), varg("0.9")};
      m.outputs = {targ(buf)};
      OpRecord& a = emit("aten::add_", "Tensor", 0);
      a.grad = false;
      a.inputs = {targ(buf), targ(p.grad), varg("1")};
      a.outputs = {targ(buf)};
      Tensor next = fresh("Float", p.value.stats.shape, 0.05, true);
      next.stats.param = name;
      OpRecord& u = emit("aten::add_", "Tensor", 0);
      u.grad = false;
      u.inputs = {targ(p.value), targ(buf), varg("-0.01")};
      u.outputs = {targ(next)};
      p.value = next;
    }
  }

  Variant v_;
  std::mt19937_64 rng_;
  std::mt19937_64 noise_rng_;
  std::map<std::string, Param> params_;
  std::map<std::pair<std::string, int>, int64_t> calls_;
  std::vector<OpRecord>* out_ = nullptr;
  int64_t step_ = 0;
  int64_t seq_ = 0;
  int64_t sn_ = 0;
  bool bad_ = false;
  bool overflowed_ = false;
};

}  // namespace precprobe::bench
