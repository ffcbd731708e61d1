// The table of hlopt's XLA FFI handlers: every kernel file adds its handlers with
// HLOPT_REGISTER_HANDLER, and module.cc exposes the table to Python as
// `hlopt.runtime._native.handlers` (name -> PyCapsule), which runtime/kernels.py
// registers with XLA. A new kernel file needs no edit anywhere else: setup.py
// compiles every runtime/native/*.cc.
#ifndef HLOPT_RUNTIME_NATIVE_REGISTRY_H_
#define HLOPT_RUNTIME_NATIVE_REGISTRY_H_

#include <utility>
#include <vector>

#include "xla/ffi/api/c_api.h"
#include "xla/ffi/api/ffi.h"

namespace hlopt {

struct HandlerEntry {
  const char* name;  // the custom-call target, `hlopt_...`
  XLA_FFI_Handler* handler;
};

// Every registered handler (filled by static initialisers, read once by PyInit__native).
std::vector<HandlerEntry>& handler_table();

struct RegisterHandler {
  RegisterHandler(const char* name, XLA_FFI_Handler* handler) {
    handler_table().push_back({name, handler});
  }
};

template <typename... Args>
struct ArgList {};

// `binding` with the operands A, Rest... added. A Binding can be neither copied nor moved out of
// its chain of calls, so each step returns the next call's result (a prvalue) itself.
template <typename B, typename A, typename... Rest>
auto with_args(B&& binding, ArgList<A, Rest...>) {
  if constexpr (sizeof...(Rest) == 0) {
    return std::move(binding).template Arg<A>();
  } else {
    return with_args(std::move(binding).template Arg<A>(), ArgList<Rest...>{});
  }
}

// The binding of a handler that runs on XLA:CPU's intra-op thread pool and takes the operands
// `Args...` (attributes and results are added to it): `bind_pooled<ffi::AnyBuffer, ...>().Ret<...>()`.
template <typename... Args>
auto bind_pooled() {
  return with_args(xla::ffi::Ffi::Bind().Ctx<xla::ffi::ThreadPool>(), ArgList<Args...>{});
}

}  // namespace hlopt

#define HLOPT_REGISTER_HANDLER_CAT2(a, b) a##b
#define HLOPT_REGISTER_HANDLER_CAT(a, b) HLOPT_REGISTER_HANDLER_CAT2(a, b)
// HLOPT_REGISTER_HANDLER("hlopt_target", handler_symbol);
#define HLOPT_REGISTER_HANDLER(name, handler)                                          \
  static ::hlopt::RegisterHandler HLOPT_REGISTER_HANDLER_CAT(hlopt_registered_, __LINE__)( \
      name, handler)

#endif  // HLOPT_RUNTIME_NATIVE_REGISTRY_H_
