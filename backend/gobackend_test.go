package backend

import "testing"

func TestGoBackendConformance(t *testing.T) {
	b, err := Open(GoName)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	RunConformance(t, b)
}
