// The Python extension hlopt.runtime._native: `handlers`, a dict of custom-call target name ->
// PyCapsule of its XLA FFI handler, for jax.ffi.register_ffi_target (runtime/kernels.py).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <vector>

#include "registry.h"

namespace hlopt {

std::vector<HandlerEntry>& handler_table() {
  static std::vector<HandlerEntry> table;
  return table;
}

}  // namespace hlopt

namespace {

PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    "_native",
    "hlopt's CPU kernels as XLA FFI handlers: `handlers` maps each custom-call target to a "
    "PyCapsule of its handler.",
    -1,
    nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__native(void) {
  PyObject* module = PyModule_Create(&native_module);
  if (module == nullptr) return nullptr;
  PyObject* handlers = PyDict_New();
  if (handlers == nullptr) {
    Py_DECREF(module);
    return nullptr;
  }
  for (const hlopt::HandlerEntry& entry : hlopt::handler_table()) {
    PyObject* capsule = PyCapsule_New(reinterpret_cast<void*>(entry.handler), nullptr, nullptr);
    if (capsule == nullptr || PyDict_SetItemString(handlers, entry.name, capsule) < 0) {
      Py_XDECREF(capsule);
      Py_DECREF(handlers);
      Py_DECREF(module);
      return nullptr;
    }
    Py_DECREF(capsule);
  }
  if (PyModule_AddObject(module, "handlers", handlers) < 0) {
    Py_DECREF(handlers);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
