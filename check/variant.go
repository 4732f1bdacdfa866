package check

import "kimimoe/validation"

// variant is one way a mistake can be made: the case as the kernel
// computed it, given as c or built by make when it is measured. Variants
// that rewrite weights are made one at a time into their scope's scratch
// buffers, so a hypothesis's variants never hold several copies of a
// layer's weights.
type variant struct {
	what string
	c    *validation.Case
	make func() *validation.Case
}

// lazy is a variant made when it is measured.
func lazy(what string, make func() *validation.Case) variant {
	return variant{what: what, make: make}
}

// instance is v's case, made now if v is lazy.
func (v variant) instance() *validation.Case {
	if v.make != nil {
		return v.make()
	}
	return v.c
}

// hypothesis builds the variants of a mistake for a case, or says why it
// does not apply. A variant need only be right on the rows of its scope.
type hypothesis struct {
	name, doc string
	build     func(c *validation.Case, s scope) ([]variant, string)
}

// scope is what a variant is measured on: the local experts that some
// measured row routes to. Variants that rewrite weights rewrite only these
// experts, so a screen on one row copies and decodes a few experts instead
// of the whole layer. Their other experts' bytes are left as they lie in
// scratch, a buffer per source matrix that each variant of the scope
// reuses: the scope's variants are made and measured one at a time.
type scope struct {
	experts []bool
	scratch map[*uint8][]uint8
}

// scopeOf is the scope of rows of c.
func scopeOf(c *validation.Case, rows []int) scope {
	w, in := c.Weights, &c.Input
	s := scope{experts: make([]bool, w.E), scratch: map[*uint8][]uint8{}}
	for _, t := range rows {
		for _, id := range in.TopKIDs[t*in.TopK : (t+1)*in.TopK] {
			if e, ok := c.Spec.EP.Local(int64(id), w.E); ok {
				s.experts[e] = true
			}
		}
	}
	return s
}

// everyExpert is the scope of all of c's experts.
func everyExpert(c *validation.Case) scope {
	s := scope{experts: make([]bool, c.Weights.E), scratch: map[*uint8][]uint8{}}
	for e := range s.experts {
		s.experts[e] = true
	}
	return s
}

// perExpert returns s's scratch buffer for src, holding src's E equal
// parts (one an expert) passed through f for the experts of s; the others'
// bytes are not to be read.
func (s scope) perExpert(src []uint8, f func(dst, src []uint8)) []uint8 {
	if len(src) == 0 {
		return src
	}
	dst, ok := s.scratch[&src[0]]
	if !ok {
		dst = make([]uint8, len(src))
		s.scratch[&src[0]] = dst
	}
	n := len(src) / len(s.experts)
	for e, in := range s.experts {
		if in {
			f(dst[e*n:(e+1)*n], src[e*n:(e+1)*n])
		}
	}
	return dst
}
