//go:build !cgo

package account

// nssInProcess: os/user reads /etc/passwd and /etc/group only.
const nssInProcess = false
