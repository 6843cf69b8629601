package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/federation"
)

// newFederation returns the federation manager of ctl: it talks to ctl's
// peers every tick with their tokens, which vault opens.
func newFederation(ctl *controller.Controller, vault *auth.Vault, tick time.Duration, log *slog.Logger) *federation.Manager {
	return federation.NewManager(federation.Config{Origin: federationOrigin{ctl}, Tick: tick, Log: log,
		Token: func(p *berth.Peer) (string, error) { return vault.OpenPeerToken(p.Name, p.SealedToken) }})
}

// federationOrigin is the controller as the federation manager drives it.
type federationOrigin struct{ *controller.Controller }

// FederationWork is the controller's, in the manager's terms.
func (o federationOrigin) FederationWork(ctx context.Context, peer string) (*federation.Work, error) {
	w, err := o.Controller.FederationWork(ctx, peer)
	if err != nil {
		return nil, err
	}
	out := &federation.Work{Cancels: w.Cancels, Cursor: w.Cursor, Active: w.Active}
	for _, d := range w.Deliver {
		out.Deliver = append(out.Deliver, federation.Delivery{Handoff: d.Handoff, Spec: d.Spec})
	}
	return out, nil
}
