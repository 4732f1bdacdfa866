package main

import "errors"

func runPlan(args []string) error  { return errors.New("not implemented yet") }
func runBench(args []string) error { return errors.New("not implemented yet") }
