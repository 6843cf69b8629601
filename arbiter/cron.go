package arbiter

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Cron is a parsed standard (Vixie) cron expression: five fields, minute
// hour day-of-month month day-of-week. Each field is a comma-separated list
// of "*", N, N-M, each optionally with "/STEP", or N/STEP (N to the end,
// every STEP). Months may be written JAN–DEC and days of the week SUN–SAT
// (case-insensitive; 0 and 7 are both Sunday). The macros @yearly
// (@annually), @monthly, @weekly, @daily (@midnight) and @hourly stand for
// their usual expressions. As in cron, when both the day of the month and
// the day of the week are restricted (neither starts with "*"), a day
// matches if either does; otherwise it must match both.
type Cron struct {
	expr                     string
	minute, hour, dom, month uint64 // bit i set: value i matches
	dow                      uint64 // 0–6, Sunday 0
	domStar, dowStar         bool   // the field starts with "*"
}

// cronField is the range and names of one field.
type cronField struct {
	name     string
	min, max int
	names    []string // names[i] is value min+i
}

var (
	months = []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}
	days   = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}
	fields = [5]cronField{
		{name: "minute", min: 0, max: 59},
		{name: "hour", min: 0, max: 23},
		{name: "day of month", min: 1, max: 31},
		{name: "month", min: 1, max: 12, names: months},
		{name: "day of week", min: 0, max: 7, names: days},
	}
	macros = map[string]string{
		"@yearly":   "0 0 1 1 *",
		"@annually": "0 0 1 1 *",
		"@monthly":  "0 0 1 * *",
		"@weekly":   "0 0 * * 0",
		"@daily":    "0 0 * * *",
		"@midnight": "0 0 * * *",
		"@hourly":   "0 * * * *",
	}
)

// ParseCron parses a standard 5-field cron expression (see Cron). It
// returns an error naming the field and the rule broken; an expression
// that can never match (such as "0 0 30 2 *") is an error too.
func ParseCron(s string) (*Cron, error) {
	expr := strings.TrimSpace(s)
	spec := expr
	if strings.HasPrefix(spec, "@") {
		m, ok := macros[strings.ToLower(spec)]
		if !ok {
			return nil, fmt.Errorf("unknown macro %q (want @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)", spec)
		}
		spec = m
	}
	parts := strings.Fields(spec)
	if len(parts) != 5 {
		return nil, fmt.Errorf("%q has %d fields; want 5: minute hour day-of-month month day-of-week", s, len(parts))
	}
	c := &Cron{expr: expr}
	masks := [5]*uint64{&c.minute, &c.hour, &c.dom, &c.month, &c.dow}
	for i, p := range parts {
		m, err := fields[i].parse(p)
		if err != nil {
			return nil, err
		}
		*masks[i] = m
	}
	if c.dow&(1<<7) != 0 { // 7 is Sunday too
		c.dow = c.dow&^(1<<7) | 1
	}
	c.domStar, c.dowStar = strings.HasPrefix(parts[2], "*"), strings.HasPrefix(parts[4], "*")
	if c.domStar || c.dowStar { // days must match the day of the month
		possible := false
		for m := 1; m <= 12; m++ {
			if c.month&(1<<m) != 0 && c.dom&(1<<(daysIn(m)+1)-1) != 0 {
				possible = true
				break
			}
		}
		if !possible {
			return nil, fmt.Errorf("%q never matches: no month it names has the days of the month it names", s)
		}
	}
	return c, nil
}

// daysIn returns the most days month m (1–12) has.
func daysIn(m int) int {
	switch time.Month(m) {
	case time.February:
		return 29
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}

// parse returns the mask of the values a field's list names.
func (f cronField) parse(list string) (uint64, error) {
	var mask uint64
	for _, item := range strings.Split(list, ",") {
		if item == "" {
			return 0, fmt.Errorf("%s: %q has an empty list item", f.name, list)
		}
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("%s: step %q in %q must be a whole number ≥ 1", f.name, stepText, item)
			}
			step = n
		}
		lo, hi := f.min, f.max
		switch {
		case rng == "*":
			if f.max == 7 { // day of week: * is 0–6
				hi = 6
			}
		default:
			from, to, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = f.value(from, item); err != nil {
				return 0, err
			}
			hi = lo
			if isRange {
				if hi, err = f.value(to, item); err != nil {
					return 0, err
				}
				if hi < lo {
					return 0, fmt.Errorf("%s: range %q runs backwards", f.name, rng)
				}
			} else if hasStep { // N/STEP: from N to the end
				hi = f.max
				if f.max == 7 {
					hi = 6
				}
			}
		}
		if hasStep && step > f.max-f.min+1 {
			return 0, fmt.Errorf("%s: step %d in %q exceeds the field's range %d-%d", f.name, step, item, f.min, f.max)
		}
		for v := lo; v <= hi; v += step {
			mask |= 1 << v
		}
	}
	return mask, nil
}

// value parses one number or name of the field.
func (f cronField) value(s, item string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < f.min || n > f.max {
			return 0, fmt.Errorf("%s: %d in %q is outside %d-%d", f.name, n, item, f.min, f.max)
		}
		return n, nil
	}
	for i, name := range f.names {
		if strings.EqualFold(s, name) {
			return f.min + i, nil
		}
	}
	if f.names != nil {
		return 0, fmt.Errorf("%s: %q in %q is neither a number %d-%d nor a name %s-%s", f.name, s, item, f.min, f.max,
			strings.ToUpper(f.names[0]), strings.ToUpper(f.names[len(f.names)-1]))
	}
	return 0, fmt.Errorf("%s: %q in %q is not a number %d-%d", f.name, s, item, f.min, f.max)
}

// String returns the expression as given (trimmed).
func (c *Cron) String() string { return c.expr }

// dayMatches reports whether t's day matches the day fields.
func (c *Cron) dayMatches(t time.Time) bool {
	dom := c.dom&(1<<t.Day()) != 0
	dow := c.dow&(1<<int(t.Weekday())) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow
}

// searchYears bounds Next's search: every expression ParseCron accepts
// matches within it (a leap day on a given weekday recurs within 40 years,
// across a century that is not a leap year).
const searchYears = 100

// Next returns the first time strictly after after, in after's location
// and at a whole minute, that c matches; the zero time if none does within
// 100 years. Wall-clock times that a daylight-saving jump skips do not
// occur, so they never match.
func (c *Cron) Next(after time.Time) time.Time {
	loc := after.Location()
	t := after.Truncate(time.Minute).Add(time.Minute)
	limit := t.Year() + searchYears
	for t.Year() <= limit {
		y, m, d := t.Date()
		var next time.Time
		switch {
		case c.month&(1<<int(m)) == 0:
			next = time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
		case !c.dayMatches(t):
			next = time.Date(y, m, d+1, 0, 0, 0, 0, loc)
		case c.hour&(1<<t.Hour()) == 0:
			next = time.Date(y, m, d, t.Hour()+1, 0, 0, 0, loc)
		case c.minute&(1<<t.Minute()) == 0:
			// The next matching minute of this hour, else the next hour.
			rest := c.minute >> (t.Minute() + 1) << (t.Minute() + 1)
			if rest == 0 {
				next = time.Date(y, m, d, t.Hour()+1, 0, 0, 0, loc)
			} else {
				next = t.Add(time.Duration(bits.TrailingZeros64(rest)-t.Minute()) * time.Minute)
			}
		default:
			return t
		}
		if !next.After(t) { // a daylight-saving fold: never go back
			next = t.Add(time.Minute)
		}
		t = next
	}
	return time.Time{}
}
