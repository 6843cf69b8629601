package berth_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
)

func TestWebhookMatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		events   []string
		disabled bool
		typ      string
		want     bool
	}{
		{nil, false, "job.succeeded", true},
		{[]string{}, false, "worker.lost", true},
		{[]string{"*"}, false, "service.ready", true},
		{[]string{"job."}, false, "job.succeeded", true},
		{[]string{"job."}, false, "jobs.succeeded", false},
		{[]string{"job"}, false, "job.succeeded", false}, // no dot: a type, not a prefix
		{[]string{"job.", "service.ready"}, false, "service.ready", true},
		{[]string{"job.", "service.ready"}, false, "service.readyish", false},
		{[]string{"service.ready"}, false, "service.unready", false},
		{nil, true, "job.succeeded", false},
		{[]string{"job."}, true, "job.succeeded", false},
	} {
		w := berth.Webhook{Events: tc.events, Disabled: tc.disabled}
		if got := w.Matches(tc.typ); got != tc.want {
			t.Errorf("%v (disabled %v) matches %q = %v, want %v", tc.events, tc.disabled, tc.typ, got, tc.want)
		}
	}
}

func TestWebhookRequestValidate(t *testing.T) {
	t.Parallel()
	ok := []berth.WebhookRequest{
		{URL: "http://127.0.0.1:9000/hook"},
		{URL: "https://hooks.example.com/berth?token=x", Secret: "s", Events: []string{"job.", "service.ready", "quota.set"}},
		{URL: "https://h.example/", Events: []string{"worker.control", "service."}},
	}
	for _, r := range ok {
		if err := r.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want ok", r, err)
		}
	}
	bad := []struct {
		r     berth.WebhookRequest
		field string
	}{
		{berth.WebhookRequest{}, "url"},
		{berth.WebhookRequest{URL: "ftp://h/"}, "url"},
		{berth.WebhookRequest{URL: "file:///etc/passwd"}, "url"},
		{berth.WebhookRequest{URL: "http:opaque"}, "url"},
		{berth.WebhookRequest{URL: "://x"}, "url"},
		{berth.WebhookRequest{URL: "http://h/" + strings.Repeat("a", berth.MaxWebhookURL)}, "url"},
		{berth.WebhookRequest{URL: "http://h/", Secret: strings.Repeat("a", berth.MaxWebhookSecret+1)}, "secret"},
		{berth.WebhookRequest{URL: "http://h/", Events: make([]string, berth.MaxWebhookEvents+1)}, "events"},
		{berth.WebhookRequest{URL: "http://h/", Events: []string{"job.", ""}}, "events"},
		{berth.WebhookRequest{URL: "http://h/", Events: []string{"JOB."}}, "events"},
		{berth.WebhookRequest{URL: "http://h/", Events: []string{"job *"}}, "events"},
		{berth.WebhookRequest{URL: "http://h/", Events: []string{"job.finished"}}, "events"},
		{berth.WebhookRequest{URL: "http://h/", Events: []string{"jobs."}}, "events"},
		{berth.WebhookRequest{URL: "http://h/", Events: []string{strings.Repeat("a", 65)}}, "events"},
	}
	for _, tc := range bad {
		var e *berth.Error
		if err := tc.r.Validate(); !errors.As(err, &e) || e.Code != berth.ECodeInvalid || e.Field != tc.field {
			t.Errorf("Validate(%.80v) = %v, want invalid %s", tc.r, err, tc.field)
		}
	}
	r := berth.WebhookRequest{URL: "http://h/", Events: []string{"job.", "*"}}
	if err := r.Validate(); err != nil || r.Events != nil {
		t.Errorf("Validate with * = %v, events %v; want every event (nil)", err, r.Events)
	}
}
