//go:build cgo

package account

// nssInProcess: os/user asks NSS itself (getpwnam_r, getgrouplist).
const nssInProcess = true
