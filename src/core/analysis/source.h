// RecordSource: one interface over a DumpReader (streamed) and a DumpData (in memory), so
// each analysis is written once. Private to src/core/analysis. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "precprobe/analysis.h"

namespace precprobe::analysis_detail {

class RecordSource {
 public:
  virtual ~RecordSource() = default;
  virtual std::string path() const = 0;
  virtual std::vector<RankInfo> ranks() const = 0;
  virtual std::vector<StreamStatus> statuses() const = 0;
  virtual void ops(const std::function<bool(const OpRecord&)>& fn) = 0;
  /// ops(fn), offering frames that have a digest to pass(rank, digest) first (true: the
  /// frame is passed over, its records not given to fn; DumpReader::for_each_op). Sources
  /// without digests give every record to fn.
  virtual void ops_passing(const std::function<bool(int, const FrameDigest&)>& pass,
                           const std::function<bool(const OpRecord&)>& fn) {
    (void)pass;
    ops(fn);
  }
  virtual void scaler(const std::function<bool(const ScalerRecord&)>& fn) = 0;
  virtual void grads(const std::function<bool(const GradRecord&)>& fn) = 0;
  virtual void scalars(const std::function<bool(const ScalarRecord&)>& fn) = 0;
  virtual void anomalies(const std::function<bool(const AnomalyEvent&)>& fn) = 0;
  /// The live op watchpoint hits (none in a DumpData).
  virtual void watch_hits(const std::function<bool(const OpWatchHit&)>& fn) { (void)fn; }
};

class ReaderSource final : public RecordSource {
 public:
  /// ReadOptions::digests off also turns them off for the reader's own use (set_digests).
  ReaderSource(DumpReader& reader, const ReadOptions& read) : reader_(reader), read_(read) {
    if (!read.digests) reader.set_digests(false);
  }
  std::string path() const override { return reader_.path(); }
  std::vector<RankInfo> ranks() const override { return reader_.ranks(); }
  std::vector<StreamStatus> statuses() const override { return reader_.statuses(); }
  void ops(const std::function<bool(const OpRecord&)>& fn) override {
    reader_.for_each_op(read_.filter, counted(fn));
  }
  void ops_passing(const std::function<bool(int, const FrameDigest&)>& pass,
                   const std::function<bool(const OpRecord&)>& fn) override {
    if (!read_.digests) return ops(fn);
    reader_.for_each_op(read_.filter, pass, counted(fn));
  }
  void scaler(const std::function<bool(const ScalerRecord&)>& fn) override {
    reader_.for_each_scaler(read_.filter, counted(fn));
  }
  void grads(const std::function<bool(const GradRecord&)>& fn) override {
    reader_.for_each_grad(read_.filter, counted(fn));
  }
  void scalars(const std::function<bool(const ScalarRecord&)>& fn) override {
    reader_.for_each_scalar(read_.filter, counted(fn));
  }
  void anomalies(const std::function<bool(const AnomalyEvent&)>& fn) override {
    reader_.for_each_anomaly(read_.filter, fn);
  }
  void watch_hits(const std::function<bool(const OpWatchHit&)>& fn) override {
    reader_.for_each_watch(read_.filter, fn);
  }

 private:
  // Reports progress every 4096 records so the callback costs nothing measurable.
  template <typename R>
  std::function<bool(const R&)> counted(const std::function<bool(const R&)>& fn) {
    if (!read_.progress) return fn;
    return [this, &fn](const R& r) {
      if ((++count_ & 4095u) == 0) read_.progress(count_);
      return fn(r);
    };
  }

  DumpReader& reader_;
  const ReadOptions& read_;
  uint64_t count_ = 0;
};

class DataSource final : public RecordSource {
 public:
  explicit DataSource(const DumpData& data) : data_(data) {}
  std::string path() const override { return "<memory>"; }
  std::vector<RankInfo> ranks() const override { return data_.ranks; }
  std::vector<StreamStatus> statuses() const override { return data_.statuses; }
  void ops(const std::function<bool(const OpRecord&)>& fn) override { each(data_.ops, fn); }
  void scaler(const std::function<bool(const ScalerRecord&)>& fn) override {
    each(data_.scaler, fn);
  }
  void grads(const std::function<bool(const GradRecord&)>& fn) override { each(data_.grads, fn); }
  void scalars(const std::function<bool(const ScalarRecord&)>& fn) override {
    each(data_.scalars, fn);
  }
  void anomalies(const std::function<bool(const AnomalyEvent&)>& fn) override {
    each(data_.anomalies, fn);
  }

 private:
  template <typename R>
  static void each(const std::vector<R>& v, const std::function<bool(const R&)>& fn) {
    for (const R& r : v) {
      if (!fn(r)) return;
    }
  }
  const DumpData& data_;
};

}  // namespace precprobe::analysis_detail
