package bench

// OptionError is an error in the options a benchmark was given (a flag's
// value, or a combination of them), found before anything ran: the CLI
// exits 2 for it, as for a value its flag parser refuses.
type OptionError struct{ Err error }

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// badOption marks err as an OptionError (nil stays nil).
func badOption(err error) error {
	if err == nil {
		return nil
	}
	return &OptionError{Err: err}
}
