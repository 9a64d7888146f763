// Status: what every mxmoe entry point returns instead of throwing or aborting.
#pragma once

#include <string>
#include <utility>

namespace mxmoe {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad shape, dtype, pointer or value (e.g. a NaN scale)
  kUnsupported,      // the request is valid but this build/device cannot serve it
  kIoError,          // a file could not be read or is malformed
  kCudaError,        // a CUDA runtime call failed
  kOutOfMemory,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status CudaError(std::string m) { return {StatusCode::kCudaError, std::move(m)}; }
  static Status OutOfMemory(std::string m) { return {StatusCode::kOutOfMemory, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace mxmoe

// Propagates a non-ok Status to the caller.
#define MXMOE_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::mxmoe::Status mxmoe_status_ = (expr);    \
    if (!mxmoe_status_.ok()) return mxmoe_status_; \
  } while (0)
