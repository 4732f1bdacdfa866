module kimimoe

go 1.26.0

require (
	github.com/google/go-cmp v0.6.0
	golang.org/x/sys v0.50.0
	gonum.org/v1/gonum v0.17.0
)

require github.com/x448/float16 v0.8.4
