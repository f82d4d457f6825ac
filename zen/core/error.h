// zen/core/error.h — the one error model of the library.
//
// Every failure is an exception derived from zen::Error. Callers that need to
// react differently catch the subclass:
//   - InvalidArgument: the caller's input is wrong (an id outside [0, rows),
//     width 0, a malformed trace). Retrying with the same input fails again.
//   - MismatchError: ranks disagree on what they are doing (rows, width,
//     scheme, call order). Raised on every rank, not only the odd one out.
//   - FormatError: bytes that do not decode (a trace file, a received message).
//   - TransportError: the network failed (peer died, timeout, rendezvous).
//
// Messages name the rank, the tensor and the offending value, e.g.
//   throw InvalidArgument(Where{rank, "emb.weight"}, "id ", id, " at position ",
//                         pos, " is outside [0, ", rows, ")");
// which reads "rank 3, tensor 'emb.weight': id 9000 at position 17 is outside
// [0, 8000)".
#pragma once

#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace zen {

// Where an error happened. rank < 0 means "not known at this layer"; tensor
// may be empty.
struct Where {
  int rank = -1;
  std::string_view tensor = {};
};

namespace detail {
template <typename... Parts>
std::string Concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
std::string Prefix(const Where& where);
}  // namespace detail

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& what) : Error(what) {}
  template <typename... Parts>
  InvalidArgument(const Where& where, const Parts&... parts)
      : Error(detail::Prefix(where) + detail::Concat(parts...)) {}
};

class MismatchError : public Error {
 public:
  explicit MismatchError(const std::string& what) : Error(what) {}
  template <typename... Parts>
  MismatchError(const Where& where, const Parts&... parts)
      : Error(detail::Prefix(where) + detail::Concat(parts...)) {}
};

class FormatError : public Error {
 public:
  explicit FormatError(const std::string& what) : Error(what) {}
  template <typename... Parts>
  FormatError(const Where& where, const Parts&... parts)
      : Error(detail::Prefix(where) + detail::Concat(parts...)) {}
};

class TransportError : public Error {
 public:
  explicit TransportError(const std::string& what) : Error(what) {}
  template <typename... Parts>
  TransportError(const Where& where, const Parts&... parts)
      : Error(detail::Prefix(where) + detail::Concat(parts...)) {}
};

// The message of the exception `ex` holds (what()), or "unknown exception"
// for one that is not a std::exception: for errors that carry the reason of
// an earlier failure (a store request, a peer's abort) on to the user.
std::string DescribeException(std::exception_ptr ex);

}  // namespace zen
