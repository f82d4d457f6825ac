#include "zen/core/error.h"

namespace zen::detail {

std::string Prefix(const Where& where) {
  std::string out;
  if (where.rank >= 0) out += "rank " + std::to_string(where.rank);
  if (!where.tensor.empty()) {
    if (!out.empty()) out += ", ";
    out += "tensor '" + std::string(where.tensor) + "'";
  }
  if (!out.empty()) out += ": ";
  return out;
}

}  // namespace zen::detail

namespace zen {

std::string DescribeException(std::exception_ptr ex) {
  try {
    std::rethrow_exception(ex);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace zen
