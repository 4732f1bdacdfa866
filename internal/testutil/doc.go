// Package testutil holds, in its subfolders, the helpers kimimoe's tests
// share: testref loads the reference vectors under testdata/ref for the
// packages below validation, numpyref the oracle's numpy reference cases
// (it imports validation). Only tests import them, so no binary links
// package testing.
package testutil
