//go:build cgo

package cuda

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"kimimoe/backend/cuda/internal/cu"
)

// loadKernels binds every entry point of kernelSpecs exactly once, each
// with the shared memory its tile needs where it needs more than the
// default, and leaves no kernel of the kernels struct unbound: checked
// with the driver calls replaced, so with no module and no GPU.
func TestLoadKernelsBindsEveryEntryPoint(t *testing.T) {
	defer func(f, s, r any) {
		moduleFunction = f.(func(cu.Module, string) (cu.Function, error))
		setMaxSmem = s.(func(cu.Function, int) error)
		residentCTAs = r.(func(cu.Function, int, int) (int, error))
	}(moduleFunction, setMaxSmem, residentCTAs)
	names := map[string]*byte{} // each entry point's fake function: a distinct address
	bound := map[string]int{}
	byFn := map[cu.Function]string{}
	for _, s := range kernelSpecs {
		names[s.name] = new(byte)
		byFn[cu.Function(unsafe.Pointer(names[s.name]))] = s.name
	}
	moduleFunction = func(_ cu.Module, name string) (cu.Function, error) {
		p, ok := names[name]
		if !ok {
			t.Errorf("the loader binds %s, which kernelSpecs does not list", name)
			p = new(byte)
		}
		bound[name]++
		return cu.Function(unsafe.Pointer(p)), nil
	}
	smem := map[string]int{}
	setMaxSmem = func(f cu.Function, n int) error {
		smem[byFn[f]] = n
		return nil
	}
	residentCTAs = func(cu.Function, int, int) (int, error) { return 3, nil }
	k, err := loadKernels(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range kernelSpecs {
		if bound[s.name] != 1 {
			t.Errorf("%s bound %d times", s.name, bound[s.name])
		}
		// The tiled loops' instances take more shared memory than the
		// default 48 KB a kernel gets without opting in.
		if tiled := strings.HasPrefix(s.name, "kmoe_f4_") || strings.HasPrefix(s.name, "kmoe_wg_gemm"); tiled && smem[s.name] == 0 {
			t.Errorf("%s: no dynamic shared memory set", s.name)
		}
	}
	// Every kernel field, map entry and array element is bound.
	var check func(v reflect.Value, path string)
	check = func(v reflect.Value, path string) {
		switch v.Kind() {
		case reflect.Struct:
			if f := v.FieldByName("fn"); f.IsValid() && v.NumField() == 1 {
				if f.IsNil() {
					t.Errorf("%s is not bound", path)
				}
				return
			}
			for i := range v.NumField() {
				check(v.Field(i), path+"."+v.Type().Field(i).Name)
			}
		case reflect.Map:
			if v.Len() == 0 {
				t.Errorf("%s has no instances", path)
			}
			for _, key := range v.MapKeys() {
				check(v.MapIndex(key), fmt.Sprintf("%s[%d]", path, key.Int()))
			}
		case reflect.Array:
			for i := range v.Len() {
				check(v.Index(i), path)
			}
		}
	}
	check(reflect.ValueOf(k).Elem(), "kernels")
	if k.actResident != 3 {
		t.Errorf("actResident %d, want the driver's 3", k.actResident)
	}
}
