package main

import (
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
	return federation.NewManager(federation.Config{Origin: ctl, Tick: tick, Log: log,
		Token: func(p *berth.Peer) (string, error) { return vault.OpenPeerToken(p.Name, p.SealedToken) }})
}
