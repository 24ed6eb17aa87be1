//go:build !linux

package sandbox

import "errors"

// handoverPair: --net proxy is refused before anything is prepared on
// systems without network namespaces.
func handoverPair() ([2]int, error) {
	return [2]int{}, errors.New("--net proxy needs Linux network namespaces")
}
