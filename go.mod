module github.com/zonefold/zonefold

go 1.26.0

require (
	github.com/pawelgaczynski/giouring v0.0.0-20230826085535-69588b89acb9
	github.com/spf13/cobra v1.10.2
	golang.org/x/sys v0.50.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
)
