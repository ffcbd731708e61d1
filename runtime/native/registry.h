// The table of hlopt's XLA FFI handlers: every kernel file adds its handlers with
// HLOPT_REGISTER_HANDLER, and module.cc exposes the table to Python as
// `hlopt.runtime._native.handlers` (name -> PyCapsule), which runtime/kernels.py
// registers with XLA. A new kernel file needs no edit anywhere else: setup.py
// compiles every runtime/native/*.cc.
#ifndef HLOPT_RUNTIME_NATIVE_REGISTRY_H_
#define HLOPT_RUNTIME_NATIVE_REGISTRY_H_

#include <vector>

#include "xla/ffi/api/c_api.h"

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

}  // namespace hlopt

#define HLOPT_REGISTER_HANDLER_CAT2(a, b) a##b
#define HLOPT_REGISTER_HANDLER_CAT(a, b) HLOPT_REGISTER_HANDLER_CAT2(a, b)
// HLOPT_REGISTER_HANDLER("hlopt_target", handler_symbol);
#define HLOPT_REGISTER_HANDLER(name, handler)                                          \
  static ::hlopt::RegisterHandler HLOPT_REGISTER_HANDLER_CAT(hlopt_registered_, __LINE__)( \
      name, handler)

#endif  // HLOPT_RUNTIME_NATIVE_REGISTRY_H_
