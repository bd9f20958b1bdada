#pragma once
// Scalars for TensorBoard: an event file (events.out.tfevents.<time>.<host>) in TensorBoard's
// record format, written without TensorFlow or protobuf — the few protobuf fields a scalar needs
// (Event.wall_time, .step, .file_version, .summary; Summary.Value.tag, .simple_value) encoded by
// hand, each record framed as TFRecord does (length, masked CRC-32C of the length, data, masked
// CRC-32C of the data). TensorBoard's own reader reads it (tests/python/test_tensorboard.py).
//
//   TensorBoardWriter tb("runs/exp1");
//   tb.scalar("train/loss", 3.41, step);
//   tb.flush();
#include <cstdint>
#include <cstdio>
#include <string>

namespace colossal {

class TensorBoardWriter {
 public:
  /// Creates `dir` and a new event file in it.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void scalar(const std::string& tag, double value, int64_t step);
  /// Pushes buffered records to the file (the training loop does at each log line).
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::string path_;
  std::FILE* file_ = nullptr;
};

/// CRC-32C (Castagnoli), as TFRecord uses; exposed for the tests.
uint32_t crc32c(const void* data, size_t size);

}  // namespace colossal
