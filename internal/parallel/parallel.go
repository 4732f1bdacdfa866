// Package parallel runs independent jobs on all CPUs.
package parallel

import (
	"runtime"
	"sync"
)

// For runs f(0), ..., f(n-1) on up to GOMAXPROCS goroutines and returns
// when all are done. The calls may run in any order and at once: f must
// only write what job i owns.
func For(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	wg.Wait()
}
