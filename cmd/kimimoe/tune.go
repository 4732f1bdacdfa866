package main

import (
	"kimimoe/backend"
	"kimimoe/backend/cuda"
)

// addTuneFlag adds --tune, the launch policy's overrides (cuda.Tuning).
func addTuneFlag(fs *flagSet) *string {
	return fs.String("tune", "", "cuda: override the launch policy, key=value,... (to measure what it chose between); keys:\n"+cuda.TuningHelp())
}

// openTuned opens backend name with the --tune value tune given to every
// layer it prepares; a bad value, or one for a backend with no launch
// policy, is a usage error.
func openTuned(name, tune string) (backend.Backend, cuda.Tuning, error) {
	t, err := parseTune(name, tune)
	if err != nil {
		return nil, t, err
	}
	b, err := backend.Open(name)
	if err != nil {
		return nil, t, err
	}
	return cuda.WithTuning(b, t), t, nil
}

// parseTune reads --tune for backend name: a bad value, or one for a
// backend with no launch policy, is a usage error.
func parseTune(name, tune string) (cuda.Tuning, error) {
	t, err := cuda.ParseTuning(tune)
	if err != nil {
		return t, asUsage(err)
	}
	if t != (cuda.Tuning{}) && name != "cuda" {
		return t, usagef("--tune: backend %q has no launch policy; only cuda does", name)
	}
	return t, nil
}

// refuseTune parses --tune where it cannot apply (where names the mode):
// a bad value is still an error, and a policy change is refused rather
// than silently dropped.
func refuseTune(name, tune, where string) error {
	t, err := parseTune(name, tune)
	if err != nil {
		return err
	}
	if t != (cuda.Tuning{}) {
		return usagef("--tune %q is not applied %s: drop it, or run one device's layers", tune, where)
	}
	return nil
}
