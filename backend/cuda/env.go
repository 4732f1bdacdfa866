package cuda

import (
	"fmt"
	"strconv"
	"strings"
)

// deviceOrdinal parses $KIMIMOE_DEVICE ("" means 0) against n devices.
func deviceOrdinal(env string, n int) (int, error) {
	if env == "" {
		return 0, nil
	}
	ord, err := strconv.Atoi(strings.TrimSpace(env))
	if err != nil || ord < 0 || ord >= n {
		return 0, fmt.Errorf("%w: KIMIMOE_DEVICE=%q is not a device ordinal from 0 to %d", ErrNoDevice, env, n-1)
	}
	return ord, nil
}
