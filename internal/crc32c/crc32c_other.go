//go:build !amd64

package crc32c

const useCLMUL = false

func foldCLMUL(crc uint32, p []byte) uint32 { panic("crc32c: no CLMUL on this architecture") }
