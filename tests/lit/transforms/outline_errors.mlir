// RUN: orrery-opt %s --orrery-outline-layers -verify-diagnostics

// expected-error @below {{no function @main to outline}}
module {
  func.func @other() {
    return
  }
}
