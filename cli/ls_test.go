package cli

import "testing"

// TestListedName: ls prints one name per line, so a name with a newline
// (or another control character), bytes that are not UTF-8, or a leading
// double quote is printed quoted; every other name as it is.
func TestListedName(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"plain", "plain"},
		{"with space", "with space"},
		{"d/f", "d/f"},
		{"-dash", "-dash"},
		{"é", "é"},
		{"a\nb", `"a\nb"`},
		{"tab\there", `"tab\there"`},
		{"\x7f", `"\x7f"`},
		{"bad\xffutf8", `"bad\xffutf8"`},
		{`"quoted"`, `"\"quoted\""`},
		{`mid"quote`, `mid"quote`},
	} {
		if got := listedName(tc.name); got != tc.want {
			t.Errorf("listedName(%q) = %s, want %s", tc.name, got, tc.want)
		}
	}
}
