package berth

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Bytes is a size in bytes. In JSON and YAML it is a number of bytes or a
// string with a unit: "80GiB", "512MiB", "16GB".
type Bytes int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseBytes parses "80GiB", "512M", "1024B". Units are case-sensitive as
// written above. A size people write needs its unit, as "16000" could mean
// megabytes; only 0 may go without. It errors on anything else.
func ParseBytes(given string) (Bytes, error) {
	s := strings.TrimSpace(given)
	mult := int64(0) // no unit
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil || !(f >= 0) || f*float64(mult) > 1<<62: // NaN too
		return 0, fmt.Errorf("%q is not a size such as 80GiB or 512MiB", given)
	case mult == 0 && f != 0:
		return 0, bareSize(s)
	}
	return Bytes(f * float64(mult)), nil
}

// bareSize is the error for n, a size written without its unit.
func bareSize(n string) error {
	return fmt.Errorf("%s is a bare number; write the unit: a size such as %sGiB, %sMiB or %sB", n, n, n, n)
}

// String formats b with the largest binary unit that divides it evenly.
func (b Bytes) String() string {
	for _, u := range []struct {
		s string
		m int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.m == 0 {
			return strconv.FormatInt(int64(b)/u.m, 10) + u.s
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// UnmarshalJSON accepts a number of bytes or a string with a unit.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		v, err := ParseBytes(s)
		if err != nil {
			return rejectValue[Bytes](err.Error())
		}
		*b = v
		return nil
	}
	var n int64
	if err := json.Unmarshal(data, &n); err != nil {
		return rejectValue[Bytes]("must be a size such as 80GiB or a number of bytes")
	}
	*b = Bytes(n)
	return nil
}

// Duration is a time.Duration that is "90s" or "1h30m" in JSON and YAML (a
// bare number is seconds).
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts "1h30m" or a number of seconds.
func (d *Duration) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		v, err := ParseDuration(s)
		if err != nil {
			return rejectValue[Duration](err.Error())
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(data, &secs); err != nil {
		return rejectValue[Duration]("must be a duration such as 90s or a number of seconds")
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// ParseDuration parses a Go duration ("90s", "1h30m") or a whole number
// of days ("30d"). Its error says what a duration looks like.
func ParseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n <= 100*365 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration such as 90s, 1h30m or 30d", s)
	}
	return v, nil
}

// Argv is a command line. In JSON and YAML it is a list of arguments, or one
// string that is run with "sh -c".
type Argv []string

// String returns the command as sh would take it, its words quoted where
// needed: sh -c 'echo hi; sleep 30'.
func (a Argv) String() string {
	words := make([]string, len(a))
	for i, w := range a {
		words[i] = ShellQuote(w)
	}
	return strings.Join(words, " ")
}

// UnmarshalJSON accepts a list of strings or one shell string.
func (a *Argv) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*a = Argv{"sh", "-c", s}
		return nil
	}
	var list []string
	if err := json.Unmarshal(data, &list); err != nil {
		return rejectValue[Argv]("must be a list of strings or one shell command string")
	}
	*a = list
	return nil
}

// rejectValue is the error of a Berth type's UnmarshalJSON for a value it
// rejects: an *json.UnmarshalTypeError, so that encoding/json adds the
// path of the field, with msg, what is wrong, as its Value.
func rejectValue[T any](msg string) error {
	return &json.UnmarshalTypeError{Value: msg, Type: reflect.TypeFor[T]()}
}
