// runtime/cpu/types.h — fixed-width integer types for CPU kernel code.
//
// CPU kernels are compiled with no system headers, so <cstdint> is not
// there. These aliases come from the compiler's predefined macros, which g++
// and Clang both have, so params headers that include this file
// (templates/cpu/*_params.h) compile both as host code and as JIT code.
#ifndef TAILOR_RUNTIME_CPU_TYPES_H_
#define TAILOR_RUNTIME_CPU_TYPES_H_

namespace tailor::kernels {

using int8_t = __INT8_TYPE__;
using int16_t = __INT16_TYPE__;
using int32_t = __INT32_TYPE__;
using int64_t = __INT64_TYPE__;
using uint8_t = __UINT8_TYPE__;
using uint16_t = __UINT16_TYPE__;
using uint32_t = __UINT32_TYPE__;
using uint64_t = __UINT64_TYPE__;
using size_t = __SIZE_TYPE__;

}  // namespace tailor::kernels

#endif  // TAILOR_RUNTIME_CPU_TYPES_H_
