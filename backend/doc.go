// Package backend defines how kimimoe runs an MoE layer: the small Backend
// interface every implementation satisfies, capability reporting, a registry
// by name, and the pure-Go backend "go" (the exact oracle of package moe).
// Running a suite of the validation matrix on a backend is package
// validation's Run, so that a backend links none of the case-file code. The
// conformance suite for tests is package backendtest, so that programs
// importing backend do not link package testing.
//
// A backend is opened by name (Open), reports what it can run
// (Capabilities), prepares a layer from weights and a spec (Prepare, which
// fails, naming the fallback, for anything it cannot run: activation,
// chain, recipe, shape), and runs forwards on the prepared layer. Errors
// about inputs wrap moe.ErrInput (CheckForward is the common check, done
// before any work); unsupported requests wrap ErrUnsupported; calls on a
// closed layer wrap ErrClosed. Layers are safe for concurrent use,
// including a Close concurrent with a Forward.
//
// Output and precision. Layer.Forward writes float32 [rows, K]. The "go"
// backend computes the oracle in float64 and rounds each output once to
// float32. validation.Run compares a backend's output with the float64
// oracle on the same chain and recipe: cosine >= 0.99999 and NRMSE <= 1e-3,
// the same non-finite positions, and three runs bitwise equal.
package backend
