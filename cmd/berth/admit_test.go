package main

import "testing"

// TestScheduleAddHoldUntilFits: schedule add's --hold-until-fits is
// stored with the entry's job, so that its runs are held too.
func TestScheduleAddHoldUntilFits(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	for _, id := range []string{"held", "plain"} {
		args := []string{"schedule", "add", "--id", id, "--name", id, "--cron", "@daily", "--", "true"}
		if id == "held" {
			args = append(args[:len(args)-2], "--hold-until-fits", "--", "true")
		}
		if code, out, errOut := c.run(args...); code != 0 {
			t.Fatalf("berth %v: exit %d, %q, %q", args, code, out, errOut)
		}
	}
	list := c.listSchedules()
	if len(list) != 2 || list[0].ID != "held" || list[0].Job == nil || !list[0].Job.HoldUntilFits ||
		list[1].Job == nil || list[1].Job.HoldUntilFits {
		t.Fatalf("schedules = %+v; want held's job held, plain's not", list)
	}
}
