package crc32c

import "golang.org/x/sys/cpu"

var useCLMUL = cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE41

// foldCLMUL is in crc32c_amd64.s: the CRC (not inverted) of p, whose
// length is at least 64 and a multiple of 16.
//
//go:noescape
func foldCLMUL(crc uint32, p []byte) uint32
