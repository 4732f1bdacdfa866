// Package validation holds what checks an MoE backend against the oracle:
// seeded cases (CaseSpec, GenerateWeights, GenerateCase), the validation
// matrix and its suites (ValidationMatrix: smoke, real, large, all), row
// sampling for large M (SampleRows), the metrics (Compare, AllClose) and
// the safetensors case files (ReadCase, WriteCase), and Run, which runs a
// suite on a backend and compares each output with the oracle on the same
// chain (MinCosine, MaxNRMSE, the same non-finite positions, runs bitwise
// equal).
//
// # Cases
//
// A CaseSpec is validated before use; its zero value is invalid and the
// error names the first bad field. GenerateWeights draws uniform random
// E2M1 codes with E8M0 scales over three binades around a level that puts
// GEMM1 outputs near RMS 3 and expert outputs near 1 for x ~ N(0, 1);
// GenerateCase draws x, distinct expert ids per token (by the spec's
// routing) and weights summing to 1. Both are deterministic in the seeds.
//
// # Metrics
//
// Compare reports cosine, NRMSE (RMS error over the reference's RMS), max
// and mean absolute error over the finite pairs, the count of non-finite
// mismatches and bitwise equality; AllClose is numpy's rule. Both panic
// with a "validation:" message if the lengths differ (a programmer error).
// Sums and norms are gonum's floats (scaled norms: no overflow).
//
// # Case files
//
// ReadCase reads a whole case file into memory through package
// safetensors' strict reader and checks every tensor and metadata key
// (docs/CONTRACT.md "Case files"); every problem is an error wrapping
// ErrCaseFile (or safetensors.ErrFormat, safetensors.ErrNotRegular) that
// names the file and the tensor or key. WriteCase writes atomically.
package validation
