// tailor/status.h — error handling helpers for tailor's absl::Status API.
//
// Every public entry returns absl::Status or absl::StatusOr<T> with the most
// specific canonical code and a message that names the argument and the rule
// it broke, e.g. InvalidArgument("topk_ids: dims[1] must equal k (2), got 3").
//
// Our Abseil (20220623) has no status macros, so tailor defines two:
//
//   TAILOR_RETURN_IF_ERROR(expr);            // returns expr's status if not ok
//   TAILOR_ASSIGN_OR_RETURN(auto x, expr);   // unwraps a StatusOr or returns
//
// Example:
//   absl::StatusOr<int> Parse(absl::string_view s);
//   absl::Status Use(absl::string_view s) {
//     TAILOR_ASSIGN_OR_RETURN(int value, Parse(s));
//     TAILOR_RETURN_IF_ERROR(Check(value));
//     return absl::OkStatus();
//   }
#ifndef TAILOR_STATUS_H_
#define TAILOR_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TAILOR_STATUS_CONCAT_INNER_(a, b) a##b
#define TAILOR_STATUS_CONCAT_(a, b) TAILOR_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing
// function when it is not ok.
#define TAILOR_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status tailor_status_ = (expr);          \
    if (!tailor_status_.ok()) return tailor_status_; \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status, else
// moves its value into `lhs` (a declaration such as `auto x` or an lvalue).
#define TAILOR_ASSIGN_OR_RETURN(lhs, rexpr) \
  TAILOR_ASSIGN_OR_RETURN_IMPL_(            \
      TAILOR_STATUS_CONCAT_(tailor_statusor_, __LINE__), lhs, rexpr)

#define TAILOR_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

#endif  // TAILOR_STATUS_H_
