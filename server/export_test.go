package server

import "testing"

// For the external tests (package server_test), which run fio against
// an in-process daemon when they need to hold its requests.
var HoldOps = holdOps

func NewTestDaemon(t *testing.T) (socket string) { return newDaemon(t).socket }
