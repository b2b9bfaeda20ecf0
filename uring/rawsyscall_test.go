package uring

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestHotPathSystemCallsAreRaw guards what enterSQ's and waitEvents' doc
// comments say: the two system calls every cold read makes through the
// ring, the SQ entry and the reaper's read of the completions' eventfd,
// never blocks and are made raw, so that they neither wake sysmon from its
// deep sleep nor let it take the thread's P away during a slow virtio
// entry. The scheduler's side of it is not observable from a test without
// timing, so this reads the source: the functions on that path call no
// system call the scheduler is told of (syscall.Syscall*, unix.Syscall*,
// giouring's Enter and Submit*, giouring's internalSubmit through
// submitSQ, os.File's Read of cqEvents). The reaper's wait in
// io_uring_enter where the kernel has no eventfd (or to flush overflowed
// completions) may block, so it stays announced and is not checked.
func TestHotPathSystemCallsAreRaw(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "ring.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	announced := map[string]bool{
		"Syscall": true, "Syscall6": true, "Enter": true, "Enter2": true,
		"Submit": true, "SubmitAndWait": true, "SubmitAndGetEvents": true, "submitSQ": true,
	}
	found := map[string]bool{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		name := fn.Name.Name
		switch name {
		case "reap", "waitEvents", "readEvents", "enterRoleLocked", "enterSQ":
		default:
			continue
		}
		found[name] = true
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var callee string
			switch fun := call.Fun.(type) {
			case *ast.Ident:
				callee = fun.Name
			case *ast.SelectorExpr:
				callee = fun.Sel.Name
				if x, ok := fun.X.(*ast.SelectorExpr); ok && x.Sel.Name == "cqEvents" && callee == "Read" {
					t.Errorf("%s: %s: the completions' eventfd is read with os.File's Read, which tells the scheduler (wakes sysmon)",
						name, fset.Position(call.Pos()))
				}
				if name == "reap" {
					return true // its blocking fallback enters the kernel announced
				}
			}
			if announced[callee] {
				t.Errorf("%s: %s: %s is a system call the scheduler is told of; the hot path's must be raw",
					name, fset.Position(call.Pos()), callee)
			}
			return true
		})
	}
	for _, want := range []string{"reap", "waitEvents", "readEvents", "enterRoleLocked", "enterSQ"} {
		if !found[want] {
			t.Errorf("ring.go has no function %s: this test checks a path that moved (%s)", want, strings.Join(keys(found), ", "))
		}
	}
}

func keys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
