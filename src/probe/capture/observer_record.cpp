// Observer: an op's arguments captured (capture_args, capture_tensor: a statistics slot per
// tensor, the value of anything else) and, once every slot is computed, turned into its
// record (emit). See observer.h.
#include <algorithm>
#include <string>

#include "capture/observer.h"
#include "capture/observer_internal.h"

namespace precprobe {
namespace detail {

std::string Observer::tensor_path(const std::string& name, bool input, size_t index) const {
  return rank_dir_ + "/tensors/step" + std::to_string(step_) + "/" + name +
         (input ? ".in" : ".out") + std::to_string(index) + ".npy.zst";
}

void Observer::capture_args(c10::ArrayRef<const c10::IValue> values, ArgRefs& out,
                            const PendingOp& op, const std::string* save_name, bool inputs,
                            const CaptureOptions& how, AliasCapture* alias) {
  out.reserve(out.size() + values.size());
  std::string path;
  CaptureOptions mine;
  bool aliased = false;
  auto tensor = [&](const at::Tensor& t, int64_t li) {
    if (!t.defined()) {
      out.emplace_back();  // value None: "null"
      return;
    }
    if (save_name) path = tensor_path(*save_name, inputs, out.size());
    capture_tensor(t, li, out, save_name ? &path : nullptr, mine);
    if (aliased && out.back().slot && out.back().slot->unread) alias->any_unread = true;
  };
  for (size_t i = 0; i < values.size(); ++i) {
    const c10::IValue& v = values[i];
    aliased =
        alias != nullptr && alias->positions != nullptr &&
        std::find(alias->positions->begin(), alias->positions->end(), i) != alias->positions->end();
    mine = how;
    // An out= argument's values before the op are not its input: a destination, often
    // memory nothing wrote yet.
    const bool destination = alias != nullptr && alias->destinations != nullptr &&
                             std::find(alias->destinations->begin(), alias->destinations->end(),
                                       i) != alias->destinations->end();
    mine.unread = how.unread || (!inputs && op.header.outputs_uninitialized()) || destination;
    mine.unread_if_new = aliased && alias->unread_if_new;
    if (v.isTensor()) {
      tensor(v.toTensor(), -1);
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      for (size_t k = 0; k < list.size(); ++k) tensor(list.get(k), static_cast<int64_t>(k));
    } else if (list_holds_tensor(v)) {
      int64_t k = 0;
      for (const auto& e : v.toListRef()) {  // Tensor?[] (index): None stays "null"
        if (e.isTensor()) {
          tensor(e.toTensor(), k);
        } else {
          out.emplace_back();
        }
        ++k;
      }
    } else {
      ArgRef a;
      a.value = v;
      out.push_back(std::move(a));
    }
  }
}

void Observer::capture_tensor(const at::Tensor& t, int64_t list_index, ArgRefs& out,
                              const std::string* save_path, const CaptureOptions& how) {
  ArgRef a;
  a.is_tensor = true;
  a.list_index = list_index;
  a.requires_grad = t.requires_grad();
  a.param = parameter_name(t);
  a.slot = engine_->capture(t, how);
  if (save_path) {
    const int64_t bytes = static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
    if (bytes > options_.max_tensor_bytes) {
      tensors_skipped_.fetch_add(1, std::memory_order_relaxed);
    } else {
      engine_->capture_for_save(t, *save_path);
    }
  }
  out.push_back(std::move(a));
}

void Observer::emit(PendingOp& op) {
  if (op.flush_marker) {  // every record of its step went out before it
    writer_->end_step(op.header.step);
    return;
  }
  OpRecord r = std::move(op.header);
  // Each argument built where it stays, in the argument vectors of records already written
  // when the writer has some (their strings and shapes are assigned, not allocated): its
  // statistics copied once from the slot, nothing moved after.
  auto convert = [this](const ArgRefs& from, std::vector<Arg>& to) {
    if (spare_args_.empty()) writer_->take_spare_args(spare_args_, kSpareArgsBatch);
    if (!spare_args_.empty()) {
      to = std::move(spare_args_.back());
      spare_args_.pop_back();
    }
    to.resize(from.size());
    for (size_t i = 0; i < from.size(); ++i) {
      const ArgRef& a = from[i];
      Arg& x = to[i];
      if (a.is_tensor) {
        TensorStats& t = stats_of(*a.slot, x.tensor);
        if (a.param != nullptr) {
          t.param = *a.param;
        } else {
          t.param.clear();
        }
        t.list_index = a.list_index;
        t.requires_grad = a.requires_grad;
        x.value.clear();
      } else {
        x.tensor.reset();
        x.value = ivalue_to_json(a.value);
      }
    }
  };
  convert(op.in, r.inputs);
  convert(op.out, r.outputs);
  if (options_.task == Task::kOverflowCheck && !keep_overflow(r)) return;
  if (writer_->submit(std::move(r))) ops_recorded_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace detail
}  // namespace precprobe
