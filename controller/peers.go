package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// PeerSealer seals the token that reaches a federation peer for the
// store, as secrets are sealed; auth.Vault is one (its OpenPeerToken opens
// it again for the federation manager).
type PeerSealer interface {
	SealPeerToken(peer, token string) ([]byte, error)
}

// peerSet is the controller's federation peers: by name, owned by the
// loop; and the channel closed at the next durable change of them.
type peerSet struct {
	byName map[string]*berth.Peer // with SealedToken; Token is never kept

	mu      sync.Mutex
	changed chan struct{}
}

// PutPeer creates or replaces the peer p.Name, stamped with the
// controller's clock, and returns once it is durable, with *p set to the
// peer as stored (its timeouts filled in, its created_at kept from
// before, no token). Absent timeouts take the defaults. The
// token is required to create a peer; a replacement without one keeps the
// stored token. It is sealed (Config.PeerTokens) and never kept in the
// clear. Invalid input returns an ECodeInvalid *berth.Error naming the
// field and stores nothing. The change is audited (peer.set).
func (c *Controller) PutPeer(ctx context.Context, p *berth.Peer) error {
	in := *p
	in.SetDefaults()
	if err := in.Validate(); err != nil {
		return err
	}
	var sealed []byte
	if in.Token != "" {
		if c.cfg.PeerTokens == nil {
			return berth.Errorf(berth.ECodeUnavailable, "this server keeps no sealed credentials: peers cannot be stored")
		}
		var err error
		if sealed, err = c.cfg.PeerTokens.SealPeerToken(in.Name, in.Token); err != nil {
			return err
		}
	}
	var err error
	var written <-chan struct{}
	if derr := c.do(ctx, func() {
		now := c.now().UTC()
		old := c.peers.byName[in.Name]
		switch {
		case old == nil && sealed == nil:
			err = berth.Invalidf("token", "is required to add a peer: a token of role peer minted on %s (berth token create --role peer)", in.Name)
			return
		case old != nil && sealed == nil:
			sealed = old.SealedToken
		}
		kept := in
		kept.Token, kept.SealedToken, kept.UpdatedAt = "", sealed, now
		kept.CreatedAt = now
		if old != nil {
			kept.CreatedAt = old.CreatedAt
		}
		if c.peers.byName == nil {
			c.peers.byName = map[string]*berth.Peer{}
		}
		c.peers.byName[in.Name] = &kept
		stored := kept
		c.write(&store.Batch{Federation: &store.FederationBatch{Peers: []*berth.Peer{&stored}}})
		c.emit(berth.Event{Time: now, Type: berth.EventPeerSet, Peer: in.Name, Actor: berth.ActorFrom(ctx)})
		c.afterCommit(c.peers.notify)
		*p, written = kept, c.durable()
		p.SealedToken = nil
	}); derr != nil {
		return derr
	}
	if err != nil {
		return err
	}
	return c.awaitDurable(ctx, written)
}

// DeletePeer removes the peer name and returns once that is durable. An
// unknown name is ECodeNotFound. While active jobs are handed to the peer
// (spec.cluster == name) it is refused with ECodeConflict naming how many,
// unless force: those jobs then keep their handles, and the federation
// manager no longer reaches the peer for them. The change is audited
// (peer.deleted).
func (c *Controller) DeletePeer(ctx context.Context, name string, force bool) error {
	var err error
	var written <-chan struct{}
	if derr := c.do(ctx, func() {
		if c.peers.byName[name] == nil {
			err = &berth.Error{Code: berth.ECodeNotFound, Field: "name", Message: fmt.Sprintf("no peer %q", name)}
			return
		}
		active := 0
		for _, js := range c.jobs {
			if js.view().Cluster == name && !js.view().State.Terminal() {
				active++
			}
		}
		if active > 0 && !force {
			err = &berth.Error{Code: berth.ECodeConflict, Field: "name",
				Message: fmt.Sprintf("peer %s holds %d active jobs: cancel them first, or remove it anyway with force (berth peer rm --force)", name, active)}
			return
		}
		delete(c.peers.byName, name)
		c.write(&store.Batch{Federation: &store.FederationBatch{PeerDeletes: []string{name}}})
		ev := berth.Event{Time: c.now().UTC(), Type: berth.EventPeerDeleted, Peer: name, Actor: berth.ActorFrom(ctx)}
		if active > 0 {
			ev.Reason = fmt.Sprintf("forced with %d active jobs", active)
		}
		c.emit(ev)
		c.afterCommit(c.peers.notify)
		written = c.durable()
	}); derr != nil {
		return derr
	}
	if err != nil {
		return err
	}
	return c.awaitDurable(ctx, written)
}

// Peers returns every peer, by name, as the controller holds them, once
// what it holds is durable: with SealedToken (for the federation manager
// to open), never Token.
func (c *Controller) Peers(ctx context.Context) ([]*berth.Peer, error) {
	var out []*berth.Peer
	var written <-chan struct{}
	if err := c.do(ctx, func() {
		out = make([]*berth.Peer, 0, len(c.peers.byName))
		for _, name := range slices.Sorted(maps.Keys(c.peers.byName)) {
			p := *c.peers.byName[name]
			p.SealedToken = slices.Clone(p.SealedToken)
			out = append(out, &p)
		}
		written = c.durable()
	}); err != nil {
		return nil, err
	}
	if err := c.awaitDurable(ctx, written); err != nil {
		return nil, err
	}
	return out, nil
}

// PeersChanged returns a channel closed at the next change of the peers
// (PutPeer, DeletePeer) once it is durable. The federation manager takes
// it before it reads Peers, and reads them again when it closes, so that
// no change goes unseen:
//
//	for {
//		changed := c.PeersChanged()
//		peers, err := c.Peers(ctx)
//		… // start, update or stop the peers' loops
//		select { case <-changed: case <-ctx.Done(): return }
//	}
func (c *Controller) PeersChanged() <-chan struct{} {
	c.peers.mu.Lock()
	defer c.peers.mu.Unlock()
	if c.peers.changed == nil {
		c.peers.changed = make(chan struct{})
	}
	return c.peers.changed
}

// notify closes the channel PeersChanged handed out.
func (ps *peerSet) notify() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.changed != nil {
		close(ps.changed)
		ps.changed = nil
	}
}

// loadPeers puts the stored peers in the loop's memory, at start.
func (c *Controller) loadPeers(peers []*berth.Peer) {
	c.peers.byName = make(map[string]*berth.Peer, len(peers))
	for _, p := range peers {
		c.peers.byName[p.Name] = p
	}
}
