package arbiter_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // America/New_York wherever the tests run

	"pgregory.net/rapid"

	"github.com/berth-dev/berth/arbiter"
)

func TestParseCronErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ expr, want string }{
		{"", "has 0 fields"},
		{"* * * *", "has 4 fields"},
		{"* * * * * *", "has 6 fields"},
		{"60 * * * *", "minute: 60"},
		{"* 24 * * *", "hour: 24"},
		{"* * 0 * *", "day of month: 0"},
		{"* * 32 * *", "day of month: 32"},
		{"* * * 13 *", "month: 13"},
		{"* * * 0 *", "month: 0"},
		{"* * * * 8", "day of week: 8"},
		{"* * * * -1", "day of week"},
		{"5-1 * * * *", "runs backwards"},
		{"*/0 * * * *", "step"},
		{"*/x * * * *", "step"},
		{"*/61 * * * *", "exceeds"},
		{"1,,2 * * * *", "empty list item"},
		{"a * * * *", "minute: \"a\""},
		{"* * * FOO *", "neither a number"},
		{"* * * * FUNDAY", "neither a number"},
		{"* * * MON *", "neither a number"},
		{"0 0 30 2 *", "never matches"},
		{"0 0 31 4,6,9,11 *", "never matches"},
		{"0 0 31 2 */2", "never matches"},
		{"@reboot", "unknown macro"},
		{"@every 5m", "unknown macro"},
	} {
		_, err := arbiter.ParseCron(tc.expr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseCron(%q) = %v, want an error containing %q", tc.expr, err, tc.want)
		}
	}
	// Possible somewhere: with both day fields restricted a day matches
	// either, and Feb 29 exists.
	for _, expr := range []string{"0 0 30 2 MON", "0 0 29 2 *", "0 0 31 1-12 *"} {
		if _, err := arbiter.ParseCron(expr); err != nil {
			t.Errorf("ParseCron(%q): %v", expr, err)
		}
	}
}

func TestCronNext(t *testing.T) {
	t.Parallel()
	utc := func(s string) time.Time {
		v, err := time.Parse("2006-01-02 15:04", s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	inNY := func(s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04 MST", s, ny)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		expr        string
		after, want time.Time
	}{
		{"0 6 * * *", utc("2026-06-17 12:00"), utc("2026-06-18 06:00")},
		{"0 6 * * *", utc("2026-06-17 05:59"), utc("2026-06-17 06:00")},
		{"0 6 * * *", utc("2026-06-17 06:00"), utc("2026-06-18 06:00")}, // strictly after
		{"* * * * *", utc("2026-06-17 12:00").Add(30 * time.Second), utc("2026-06-17 12:01")},
		{"*/15 * * * *", utc("2026-06-17 12:01"), utc("2026-06-17 12:15")},
		{"*/15 * * * *", utc("2026-06-17 12:45"), utc("2026-06-17 13:00")},
		{"5,10-12 * * * *", utc("2026-06-17 12:10"), utc("2026-06-17 12:11")},
		{"5,10-12 * * * *", utc("2026-06-17 12:12"), utc("2026-06-17 13:05")},
		{"10/20 * * * *", utc("2026-06-17 12:31"), utc("2026-06-17 12:50")},
		{"0 9-17/4 * * *", utc("2026-06-17 14:00"), utc("2026-06-17 17:00")},
		{"30 5 * * MON-FRI", utc("2026-06-19 06:00"), utc("2026-06-22 05:30")}, // Fri → Mon
		{"0 0 * * 7", utc("2026-06-17 00:00"), utc("2026-06-21 00:00")},        // 7 is Sunday
		{"0 0 * * sun", utc("2026-06-17 00:00"), utc("2026-06-21 00:00")},
		{"0 0 1 jan *", utc("2026-06-17 00:00"), utc("2027-01-01 00:00")},
		{"@yearly", utc("2026-06-17 00:00"), utc("2027-01-01 00:00")},
		{"@monthly", utc("2026-06-17 00:00"), utc("2026-07-01 00:00")},
		{"@weekly", utc("2026-06-17 00:00"), utc("2026-06-21 00:00")},
		{"@daily", utc("2026-06-17 00:00"), utc("2026-06-18 00:00")},
		{"@hourly", utc("2026-06-17 00:00"), utc("2026-06-17 01:00")},
		{"0 0 31 * *", utc("2026-06-17 00:00"), utc("2026-07-31 00:00")},
		{"0 0 29 2 *", utc("2026-06-17 00:00"), utc("2028-02-29 00:00")},
		// Both day fields restricted: either matches (the 13th, or any Friday).
		{"0 0 13 * FRI", utc("2026-06-17 00:00"), utc("2026-06-19 00:00")},
		{"0 0 13 * FRI", utc("2026-07-10 00:00"), utc("2026-07-13 00:00")},
		// One starts with "*": both must match (a 13th that is a Sunday
		// or a Friday; a Friday that is the 1st, 14th or 27th).
		{"0 0 13 * */5", utc("2026-06-17 00:00"), utc("2026-09-13 00:00")},
		{"0 0 */13 * FRI", utc("2026-06-17 00:00"), utc("2026-08-14 00:00")},
		// A leap day on a Sunday, across 2100 (not a leap year).
		{"0 0 29 2 */7", utc("2096-03-01 00:00"), utc("2128-02-29 00:00")},
		// New York: 2026-03-08 02:00 EST jumps to 03:00 EDT; 02:30 does
		// not occur that day.
		{"30 2 * * *", inNY("2026-03-07 23:00 EST"), inNY("2026-03-09 02:30 EDT")},
		{"0 * * * *", inNY("2026-03-08 01:00 EST"), inNY("2026-03-08 03:00 EDT")},
		// 2026-11-01 02:00 EDT falls back to 01:00 EST.
		{"30 1 * * *", inNY("2026-10-31 12:00 EDT"), inNY("2026-11-01 01:30 EDT")},
		{"0 3 * * *", inNY("2026-11-01 00:00 EDT"), inNY("2026-11-01 03:00 EST")},
	} {
		c, err := arbiter.ParseCron(tc.expr)
		if err != nil {
			t.Fatalf("ParseCron(%q): %v", tc.expr, err)
		}
		if got := c.Next(tc.after); !got.Equal(tc.want) || got.Location() != tc.after.Location() {
			t.Errorf("%q.Next(%v) = %v, want %v", tc.expr, tc.after, got, tc.want)
		}
		if c.String() != tc.expr {
			t.Errorf("String() = %q, want %q", c.String(), tc.expr)
		}
	}
}

// field is one generated cron field: its text and the values it names.
type field struct {
	text   string
	values []int
	star   bool // the text starts with "*"
}

// genField generates a field over [lo, hi] (each value of step ≥ 1).
func genField(t *rapid.T, name string, lo, hi int) field {
	span := func(a, b, step int) []int {
		var vs []int
		for v := a; v <= b; v += step {
			vs = append(vs, v)
		}
		return vs
	}
	switch rapid.IntRange(0, 3).Draw(t, name+"-kind") {
	case 0:
		return field{text: "*", values: span(lo, hi, 1), star: true}
	case 1:
		step := rapid.IntRange(1, hi-lo+1).Draw(t, name+"-step")
		return field{text: "*/" + strconv.Itoa(step), values: span(lo, hi, step), star: true}
	}
	var items []string
	var values []int
	for i := range rapid.IntRange(1, 3).Draw(t, name+"-items") {
		a := rapid.IntRange(lo, hi).Draw(t, fmt.Sprintf("%s-%d-from", name, i))
		switch rapid.IntRange(0, 2).Draw(t, fmt.Sprintf("%s-%d-kind", name, i)) {
		case 0:
			items, values = append(items, strconv.Itoa(a)), append(values, a)
		case 1:
			b := rapid.IntRange(a, hi).Draw(t, fmt.Sprintf("%s-%d-to", name, i))
			items, values = append(items, fmt.Sprintf("%d-%d", a, b)), append(values, span(a, b, 1)...)
		default:
			b := rapid.IntRange(a, hi).Draw(t, fmt.Sprintf("%s-%d-to", name, i))
			step := rapid.IntRange(1, hi-lo+1).Draw(t, fmt.Sprintf("%s-%d-step", name, i))
			items, values = append(items, fmt.Sprintf("%d-%d/%d", a, b, step)), append(values, span(a, b, step)...)
		}
	}
	return field{text: strings.Join(items, ","), values: values}
}

// TestCronNextMatchesScan checks Next against a minute-by-minute scan with
// generated expressions: the first minute the fields name is what Next
// returns.
func TestCronNextMatchesScan(t *testing.T) {
	t.Parallel()
	const horizon = 45 * 24 * 60 // minutes scanned
	rapid.Check(t, func(t *rapid.T) {
		minute := genField(t, "minute", 0, 59)
		hour := genField(t, "hour", 0, 23)
		dom := genField(t, "dom", 1, 31)
		month := field{text: "*", values: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, star: true}
		if rapid.Bool().Draw(t, "restrict-month") {
			month = genField(t, "month", 1, 12)
		}
		dow := genField(t, "dow", 0, 7)
		expr := strings.Join([]string{minute.text, hour.text, dom.text, month.text, dow.text}, " ")
		c, err := arbiter.ParseCron(expr)
		if err != nil {
			if strings.Contains(err.Error(), "never matches") {
				t.Skip(expr, "never matches")
			}
			t.Fatalf("ParseCron(%q): %v", expr, err)
		}
		after := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(
			time.Duration(rapid.Int64Range(0, 3*365*24*3600).Draw(t, "after")) * time.Second)
		has := func(f field, v int) bool { return slices.Contains(f.values, v) }
		matches := func(x time.Time) bool {
			domOK := has(dom, x.Day())
			dowOK := has(dow, int(x.Weekday())) || (x.Weekday() == time.Sunday && slices.Contains(dow.values, 7))
			day := domOK && dowOK
			if !dom.star && !dow.star {
				day = domOK || dowOK
			}
			return has(minute, x.Minute()) && has(hour, x.Hour()) && has(month, int(x.Month())) && day
		}
		got := c.Next(after)
		x := after.Truncate(time.Minute)
		for range horizon {
			x = x.Add(time.Minute)
			if matches(x) {
				if !got.Equal(x) {
					t.Fatalf("%q.Next(%v) = %v, want %v", expr, after, got, x)
				}
				return
			}
		}
		if !got.IsZero() && !got.After(x) {
			t.Fatalf("%q.Next(%v) = %v, but the scan found no match until %v", expr, after, got, x)
		}
	})
}
