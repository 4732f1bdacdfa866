package cuda

import "kimimoe/backend"

func init() {
	backend.Register("cuda", func() (backend.Backend, error) { return openBackend() })
}
